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
 *   escape-probe exe-watch SECONDS [WAIT]
 *       the runtime binary attack (CVE-2019-5736): for SECONDS (or until
 *       /tmp/exe-watch.stop exists) scans /proc for processes whose
 *       executable is not on the container's root filesystem (a runtime
 *       helper, or the host binary a `#!/proc/self/exe` script ran) and
 *       keeps an O_PATH fd on /proc/PID/exe of each; then waits up to WAIT
 *       seconds (default 10) for those processes to exit, and for each fd
 *       prints "handle: pid=P exe=LINK dev=D ino=I mount=ro|rw
 *       open-w=ok|<ERRNO> exited=yes|no" and finally "handles: N"
 *       ("denied: pid=P <ERRNO>" for each process it got no handle on). The
 *       write open goes through /proc/self/fd/N and is closed at once,
 *       never written; mount= is the fd's mount flag (a write refused only
 *       with ETXTBSY on a rw mount succeeds once the binary stops running).
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
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <time.h>
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
			"       escape-probe socket FAMILY\n"
			"       escape-probe exe-watch SECONDS [WAIT]\n");
	return 2;
}

#define MAX_HANDLES 64

struct handle {
	pid_t pid;
	int fd;
	struct stat st;
	char exe[256];
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* One pass over /proc: an fd on the executable of every process whose
 * executable is not on the root filesystem (root_dev) and not yet held. */
static void scan(dev_t root_dev, struct handle *handles, int *count, pid_t *denied, int *ndenied)
{
	DIR *proc = opendir("/proc");
	if (!proc)
		return;
	struct dirent *entry;
	while ((entry = readdir(proc)) && *count < MAX_HANDLES) {
		char *end;
		long pid = strtol(entry->d_name, &end, 10);
		if (*end || pid <= 0 || pid == getpid())
			continue;
		char link[64];
		snprintf(link, sizeof(link), "/proc/%ld/exe", pid);
		int fd = open(link, O_PATH | O_CLOEXEC);
		if (fd < 0) {
			/* Reported once per process: the kernel refused the
			 * handle (ptrace access mode), which is no escape. */
			int seen = 0;
			for (int i = 0; i < *ndenied; i++)
				seen |= denied[i] == pid;
			if (!seen && *ndenied < MAX_HANDLES && errno != ENOENT) {
				denied[(*ndenied)++] = pid;
				printf("denied: pid=%ld %s\n", pid, errno_name(errno));
			}
			continue;
		}
		struct stat st;
		if (fstat(fd, &st) < 0 || st.st_dev == root_dev) {
			close(fd);
			continue;
		}
		int known = 0;
		for (int i = 0; i < *count; i++)
			if (handles[i].pid == pid ||
			    (handles[i].st.st_dev == st.st_dev && handles[i].st.st_ino == st.st_ino))
				known = 1;
		if (known) {
			close(fd);
			continue;
		}
		struct handle *h = &handles[(*count)++];
		h->pid = pid;
		h->fd = fd;
		h->st = st;
		ssize_t n = readlink(link, h->exe, sizeof(h->exe) - 1);
		h->exe[n < 0 ? 0 : n] = 0;
	}
	closedir(proc);
}

static int exe_watch(double seconds, double wait)
{
	struct stat root;
	if (stat("/", &root) < 0) {
		printf("stat /: %s\n", errno_name(errno));
		return 2;
	}
	struct handle handles[MAX_HANDLES];
	int count = 0;
	pid_t denied[MAX_HANDLES];
	int ndenied = 0;
	double deadline = now() + seconds;
	while (now() < deadline && access("/tmp/exe-watch.stop", F_OK) != 0) {
		scan(root.st_dev, handles, &count, denied, &ndenied);
		usleep(200);
	}
	/* A running executable refuses writers (ETXTBSY): wait until the
	 * processes it was caught in are gone. */
	deadline = now() + wait;
	for (int i = 0; i < count; i++)
		while (kill(handles[i].pid, 0) == 0 && now() < deadline)
			usleep(10000);
	for (int i = 0; i < count; i++) {
		struct handle *h = &handles[i];
		struct statvfs vfs;
		const char *mount = "?";
		if (fstatvfs(h->fd, &vfs) == 0)
			mount = (vfs.f_flag & ST_RDONLY) ? "ro" : "rw";
		char path[64];
		snprintf(path, sizeof(path), "/proc/self/fd/%d", h->fd);
		int wfd = open(path, O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
		const char *writable = "ok";
		if (wfd < 0)
			writable = errno_name(errno);
		else
			close(wfd);
		printf("handle: pid=%d exe=%s dev=%llu ino=%llu mount=%s open-w=%s exited=%s\n",
		       h->pid, h->exe, (unsigned long long)h->st.st_dev,
		       (unsigned long long)h->st.st_ino, mount, writable,
		       kill(h->pid, 0) == 0 ? "no" : "yes");
		close(h->fd);
	}
	printf("handles: %d\n", count);
	return 0;
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
	if ((argc == 3 || argc == 4) && strcmp(argv[1], "exe-watch") == 0)
		return exe_watch(strtod(argv[2], NULL), argc == 4 ? strtod(argv[3], NULL) : 10);
	return usage();
}
