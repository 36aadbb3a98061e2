/*
 * A tiny HTTP server standing in for nginx (compiled with -DNGINX) and for
 * Apache httpd (compiled with -DHTTPD) in the critest stand-in images.
 *
 * What critest relies on:
 *  nginx (e2e-test-images/nginx:1.14-2, hostnet-nginx-amd64):
 *   - PID 1's /proc/1/cmdline contains "master process" (ContainerPID spec),
 *     and the process name (comm) is "nginx" (HostPID spec runs
 *     `pidof nginx` in another container);
 *   - /var/run/nginx.pid holds the server's pid (as seen in its own PID
 *     namespace, like nginx does), written once it listens;
 *   - HTTP 200 on GET / at the port of the "listen" directive in
 *     /etc/nginx/conf.d/default.conf (80 if absent; 12003 in hostnet-nginx).
 *  httpd (e2e-test-images/httpd:2.4.39-4):
 *   - a startup log line containing "httpd", then HTTP 200 on port 80
 *     ("Listen" in /usr/local/apache2/conf/httpd.conf).
 *
 * It listens on [::] dual-stack when IPv6 is available, else on 0.0.0.0,
 * serves each connection in a forked child, and exits 0 on
 * SIGTERM/SIGINT/SIGQUIT (and SIGWINCH for httpd) (it usually runs as PID 1, where signals without a
 * handler are ignored).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#if defined(NGINX)
#define NAME "nginx"
#define CONF_FILE "/etc/nginx/conf.d/default.conf"
#define PID_FILE "/var/run/nginx.pid"
#define BODY                                                                   \
	"<!DOCTYPE html>\n<html>\n<head>\n<title>Welcome to nginx!</title>\n"  \
	"</head>\n<body>\n<h1>Welcome to nginx!</h1>\n"                        \
	"<p>berth conformance stand-in for nginx.</p>\n</body>\n</html>\n"
#define SERVER "nginx/1.14.2"
#elif defined(HTTPD)
#define NAME "httpd"
#define CONF_FILE "/usr/local/apache2/conf/httpd.conf"
#define PID_FILE "/usr/local/apache2/logs/httpd.pid"
#define BODY "<html><body><h1>It works!</h1></body></html>\n"
#define SERVER "Apache/2.4.39 (Unix)"
#else
#error "compile with -DNGINX or -DHTTPD"
#endif

static void on_signal(int signo)
{
	(void)signo;
	unlink(PID_FILE);
	_exit(0);
}

/* Port from the first "listen N" / "Listen [addr:]N" directive of CONF_FILE. */
static int config_port(void)
{
	FILE *f = fopen(CONF_FILE, "re");
	if (!f)
		return 80;
	char line[512];
	int port = 80;
	while (fgets(line, sizeof(line), f)) {
		char *p = line;
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == '#' || strncasecmp(p, "listen", 6) != 0)
			continue;
		p += 6;
		if (*p != ' ' && *p != '\t')
			continue;
		while (*p == ' ' || *p == '\t')
			p++;
		char *colon = strrchr(p, ':');
		if (colon)
			p = colon + 1;
		long v = strtol(p, NULL, 10);
		if (v > 0 && v < 65536) {
			port = (int)v;
			break;
		}
	}
	fclose(f);
	return port;
}

static int listen_on(int port)
{
	int one = 1, zero = 0;
	int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		struct sockaddr_in6 a6 = {.sin6_family = AF_INET6,
					  .sin6_port = htons((uint16_t)port),
					  .sin6_addr = in6addr_any};
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
		if (bind(fd, (struct sockaddr *)&a6, sizeof(a6)) == 0 && listen(fd, 128) == 0)
			return fd;
		close(fd);
	}
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in a4 = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_ANY)};
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a4, sizeof(a4)) < 0 || listen(fd, 128) < 0) {
		int saved = errno;
		close(fd);
		errno = saved;
		return -1;
	}
	return fd;
}

static void write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		buf += n;
		len -= (size_t)n;
	}
}

static void peer_name(const struct sockaddr_storage *ss, char *buf, size_t size)
{
	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
		if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr))
			inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], buf, (socklen_t)size);
		else
			inet_ntop(AF_INET6, &a->sin6_addr, buf, (socklen_t)size);
	} else if (ss->ss_family == AF_INET) {
		inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, buf,
			  (socklen_t)size);
	} else {
		snprintf(buf, size, "-");
	}
}

static void serve(int conn, const struct sockaddr_storage *peer)
{
	char req[8192];
	size_t n = 0;

	struct timeval tv = {.tv_sec = 10};
	setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	while (n < sizeof(req) - 1) {
		ssize_t r = read(conn, req + n, sizeof(req) - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
		req[n] = '\0';
		if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
			break;
	}
	req[n] = '\0';
	if (n == 0)
		return;

	char method[16] = "", path[1024] = "";
	sscanf(req, "%15s %1023s", method, path);
	int head = strcmp(method, "HEAD") == 0;
	int ok = head || strcmp(method, "GET") == 0;

	const char *status = ok ? "200 OK" : "405 Not Allowed";
	const char *body = ok ? BODY : "method not allowed\n";
	char hdr[512];
	int hl = snprintf(hdr, sizeof(hdr),
			  "HTTP/1.1 %s\r\nServer: %s\r\nContent-Type: text/html\r\n"
			  "Content-Length: %zu\r\nConnection: close\r\n\r\n",
			  status, SERVER, strlen(body));
	write_all(conn, hdr, (size_t)hl);
	if (!head)
		write_all(conn, body, strlen(body));

	char who[INET6_ADDRSTRLEN];
	peer_name(peer, who, sizeof(who));
	printf("%s - - \"%s %s\" %d %zu\n", who, method, path, ok ? 200 : 405,
	       head ? (size_t)0 : strlen(body));
	fflush(stdout);
	shutdown(conn, SHUT_WR);
}

int main(int argc, char **argv)
{
#ifdef NGINX
	/* Become "nginx: master process <original command line>" like nginx
	 * does, by re-executing ourselves (by path, so that comm stays
	 * "nginx") with that single argv[0]. */
	if (!strstr(argv[0], "master process")) {
		char title[2048];
		size_t len = (size_t)snprintf(title, sizeof(title), "nginx: master process");
		for (int i = 0; i < argc && len < sizeof(title); i++)
			len += (size_t)snprintf(title + len, sizeof(title) - len, " %s", argv[i]);
		char self[PATH_MAX];
		ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (sl > 0) {
			self[sl] = '\0';
			char *nargv[] = {title, NULL};
			execv(self, nargv);
		}
		fprintf(stderr, "nginx: warning: could not re-exec as master process: %s\n",
			strerror(errno));
	}
#else
	(void)argc;
	(void)argv;
#endif

	setvbuf(stdout, NULL, _IOLBF, 0);

	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGQUIT, &sa, NULL);
#ifdef HTTPD
	sigaction(SIGWINCH, &sa, NULL); /* httpd's graceful stop (image STOPSIGNAL) */
#endif
	/* Children (one per connection) and adopted orphans are reaped by the
	 * kernel. */
	signal(SIGCHLD, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);

	int port = config_port();
	int lfd = listen_on(port);
	if (lfd < 0) {
		fprintf(stderr, NAME ": [emerg] bind() to port %d failed: %s\n", port,
			strerror(errno));
		return 1;
	}

	FILE *pf = fopen(PID_FILE, "we");
	if (pf) {
		fprintf(pf, "%ld\n", (long)getpid());
		fclose(pf);
	} else {
		fprintf(stderr, NAME ": [warn] cannot write %s: %s\n", PID_FILE, strerror(errno));
	}

#ifdef HTTPD
	fprintf(stderr,
		"[mpm_event:notice] [pid %ld] " SERVER " httpd stand-in configured -- "
		"resuming normal operations\n"
		"[core:notice] [pid %ld] httpd listening on port %d\n",
		(long)getpid(), (long)getpid(), port);
#else
	fprintf(stderr, "nginx: [notice] nginx stand-in (" SERVER ") listening on port %d\n", port);
#endif

	for (;;) {
		struct sockaddr_storage peer;
		socklen_t plen = sizeof(peer);
		int conn = accept4(lfd, (struct sockaddr *)&peer, &plen, SOCK_CLOEXEC);
		if (conn < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE ||
			    errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
				continue;
			fprintf(stderr, NAME ": [alert] accept() failed: %s\n", strerror(errno));
			return 1;
		}
		pid_t pid = fork();
		if (pid == 0) {
			close(lfd);
			struct sigaction dfl = {.sa_handler = SIG_DFL};
			sigaction(SIGTERM, &dfl, NULL);
			sigaction(SIGINT, &dfl, NULL);
			sigaction(SIGQUIT, &dfl, NULL);
#ifdef HTTPD
			sigaction(SIGWINCH, &dfl, NULL);
#endif
			serve(conn, &peer);
			close(conn);
			_exit(0);
		}
		if (pid < 0)
			serve(conn, &peer);
		close(conn);
	}
}
