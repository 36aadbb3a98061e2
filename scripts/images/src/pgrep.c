/*
 * pgrep: minimal procps-compatible pgrep for the busybox stand-in image
 * (Debian's busybox has no pgrep applet). critest runs
 * `sh -c "pgrep sleep || true"` and expects empty output when no process is
 * named "sleep".
 *
 * Usage: pgrep [-flnxoa] [-d DELIM] PATTERN
 *   PATTERN is an extended regular expression matched against the process
 *   name (/proc/PID/comm), or against the full command line with -f.
 *   -x exact match, -l also print the name, -a also print the command line,
 *   -n newest only, -o oldest only, -d output delimiter (default newline).
 * Exit status: 0 if something matched, 1 if nothing did, 2 on usage error.
 * pgrep never reports itself.
 */
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int read_file(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t n = 0;
	while (n < size - 1) {
		ssize_t r = read(fd, buf + n, size - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	buf[n] = '\0';
	return (int)n;
}

static void usage(void)
{
	fprintf(stderr, "Usage: pgrep [-flnxoa] [-d DELIM] PATTERN\n");
	exit(2);
}

struct match {
	long pid;
	unsigned long long start;
	char name[64];
	char cmdline[4096];
};

int main(int argc, char **argv)
{
	int full = 0, exact = 0, list_name = 0, list_full = 0, newest = 0, oldest = 0;
	const char *delim = "\n";
	int opt;

	while ((opt = getopt(argc, argv, "flnxoad:")) != -1) {
		switch (opt) {
		case 'f': full = 1; break;
		case 'l': list_name = 1; break;
		case 'a': list_full = 1; break;
		case 'n': newest = 1; break;
		case 'o': oldest = 1; break;
		case 'x': exact = 1; break;
		case 'd': delim = optarg; break;
		default: usage();
		}
	}
	if (optind != argc - 1 || (newest && oldest))
		usage();

	const char *pattern = argv[optind];
	char *re_src = malloc(strlen(pattern) + 8);
	if (!re_src)
		return 3;
	if (exact)
		sprintf(re_src, "^(%s)$", pattern);
	else
		strcpy(re_src, pattern);

	regex_t re;
	int rc = regcomp(&re, re_src, REG_EXTENDED | REG_NOSUB);
	if (rc != 0) {
		char err[256];
		regerror(rc, &re, err, sizeof(err));
		fprintf(stderr, "pgrep: invalid pattern: %s\n", err);
		return 2;
	}

	DIR *proc = opendir("/proc");
	if (!proc) {
		perror("pgrep: /proc");
		return 3;
	}

	long self = (long)getpid();
	struct match best = {0}, cur;
	int found = 0, first = 1;
	struct dirent *de;

	while ((de = readdir(proc)) != NULL) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		char *end;
		long pid = strtol(de->d_name, &end, 10);
		if (*end || pid == self)
			continue;

		char path[64];
		memset(&cur, 0, sizeof(cur));
		cur.pid = pid;

		snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
		if (read_file(path, cur.name, sizeof(cur.name)) < 0)
			continue;
		cur.name[strcspn(cur.name, "\n")] = '\0';

		snprintf(path, sizeof(path), "/proc/%ld/cmdline", pid);
		int n = read_file(path, cur.cmdline, sizeof(cur.cmdline));
		if (n < 0)
			continue;
		for (int i = 0; i < n; i++)
			if (cur.cmdline[i] == '\0')
				cur.cmdline[i] = ' ';
		while (n > 0 && cur.cmdline[n - 1] == ' ')
			cur.cmdline[--n] = '\0';

		const char *subject = cur.name;
		if (full && cur.cmdline[0])
			subject = cur.cmdline;
		if (regexec(&re, subject, 0, NULL, 0) != 0)
			continue;

		if (newest || oldest) {
			/* field 22 of /proc/PID/stat: start time */
			char stat[1024];
			snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
			if (read_file(path, stat, sizeof(stat)) < 0)
				continue;
			char *p = strrchr(stat, ')');
			if (!p)
				continue;
			/* after ") " comes field 3; skip to field 22 */
			int field = 2;
			p++;
			while (*p && field < 21) {
				if (*p == ' ')
					field++;
				p++;
			}
			cur.start = strtoull(p, NULL, 10);
			if (!found || (newest && cur.start >= best.start) ||
			    (oldest && cur.start < best.start))
				best = cur;
			found = 1;
			continue;
		}

		found = 1;
		if (!first)
			fputs(delim, stdout);
		first = 0;
		if (list_full)
			printf("%ld %s", pid, cur.cmdline[0] ? cur.cmdline : cur.name);
		else if (list_name)
			printf("%ld %s", pid, cur.name);
		else
			printf("%ld", pid);
	}
	closedir(proc);

	if ((newest || oldest) && found) {
		if (list_full)
			printf("%ld %s", best.pid, best.cmdline[0] ? best.cmdline : best.name);
		else if (list_name)
			printf("%ld %s", best.pid, best.name);
		else
			printf("%ld", best.pid);
		first = 0;
	}
	if (!first)
		putchar('\n');
	return found ? 0 : 1;
}
