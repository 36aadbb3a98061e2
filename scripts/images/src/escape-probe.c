/*
 * escape-probe: the hostile workload of berth's escape suite
 * (scripts/escape/). Each subcommand tries one way out of the container
 * and prints what the kernel answered; it only opens, never writes, what
 * it did not make itself.
 *
 *   escape-probe open PATH r|w|rw
 *       open(2) PATH; prints "open: ok" or "open: <ERRNO>".
 *   escape-probe mknod-open b|c MAJOR MINOR r|w|rw
 *       makes the node in a directory of its own under /tmp, opens it and
 *       removes both; prints "mknod: ok|<ERRNO>" and "open: ok|<ERRNO>".
 *   escape-probe socket FAMILY
 *       socket(FAMILY, SOCK_STREAM, 0), closed at once; prints
 *       "socket: ok|<ERRNO>" (the exit status as for open).
 *
 * Exit status: 0 when the last open succeeded, 1 when it was refused,
 * 2 on a usage error. Opens use O_NOCTTY (a terminal never becomes the
 * probe's) and O_NONBLOCK (a FIFO or tty never blocks it).
 *
 * Built statically, so it runs in any image.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static const char *errno_name(int err)
{
	switch (err) {
	case EPERM: return "EPERM";
	case EACCES: return "EACCES";
	case ENOENT: return "ENOENT";
	case EROFS: return "EROFS";
	case ETXTBSY: return "ETXTBSY";
	case ENXIO: return "ENXIO";
	case ENODEV: return "ENODEV";
	case EINVAL: return "EINVAL";
	case EEXIST: return "EEXIST";
	case EBUSY: return "EBUSY";
	case EIO: return "EIO";
	case ENOTDIR: return "ENOTDIR";
	case EISDIR: return "EISDIR";
	case EAFNOSUPPORT: return "EAFNOSUPPORT";
	case EPROTONOSUPPORT: return "EPROTONOSUPPORT";
	default: return strerror(err);
	}
}

static int access_flags(const char *mode)
{
	if (strcmp(mode, "r") == 0)
		return O_RDONLY;
	if (strcmp(mode, "w") == 0)
		return O_WRONLY;
	if (strcmp(mode, "rw") == 0)
		return O_RDWR;
	return -1;
}

/* Opens PATH, reports, closes. Returns 0 when it opened. */
static int try_open(const char *path, int flags)
{
	int fd = open(path, flags | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		printf("open: %s\n", errno_name(errno));
		return 1;
	}
	printf("open: ok\n");
	close(fd);
	return 0;
}

static int usage(void)
{
	fprintf(stderr, "usage: escape-probe open PATH r|w|rw\n"
			"       escape-probe mknod-open b|c MAJOR MINOR r|w|rw\n"
			"       escape-probe socket FAMILY\n");
	return 2;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "open") == 0) {
		int flags = access_flags(argv[3]);
		if (flags < 0)
			return usage();
		return try_open(argv[2], flags);
	}
	if (argc == 6 && strcmp(argv[1], "mknod-open") == 0) {
		mode_t type;
		if (strcmp(argv[2], "b") == 0)
			type = S_IFBLK;
		else if (strcmp(argv[2], "c") == 0)
			type = S_IFCHR;
		else
			return usage();
		int flags = access_flags(argv[5]);
		if (flags < 0)
			return usage();
		char dir[] = "/tmp/escape-probe.XXXXXX";
		if (!mkdtemp(dir)) {
			printf("mkdtemp: %s\n", errno_name(errno));
			return 2;
		}
		char node[sizeof(dir) + 8];
		snprintf(node, sizeof(node), "%s/node", dir);
		dev_t dev = makedev(strtoul(argv[3], NULL, 10), strtoul(argv[4], NULL, 10));
		int status = 1;
		if (mknod(node, type | 0600, dev) < 0) {
			printf("mknod: %s\nopen: not tried\n", errno_name(errno));
		} else {
			printf("mknod: ok\n");
			status = try_open(node, flags);
			unlink(node);
		}
		rmdir(dir);
		return status;
	}
	if (argc == 3 && strcmp(argv[1], "socket") == 0) {
		int fd = socket((int)strtol(argv[2], NULL, 10), SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			printf("socket: %s\n", errno_name(errno));
			return 1;
		}
		printf("socket: ok\n");
		close(fd);
		return 0;
	}
	return usage();
}
