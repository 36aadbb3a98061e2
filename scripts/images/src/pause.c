/*
 * pause: the sandbox ("infra") process of a pod, a stand-in for
 * registry.k8s.io/pause:3.9. Same behaviour as the upstream pause.c:
 * sleeps forever, reaps adopted zombies (it is PID 1 of a shared PID
 * namespace), and exits 0 on SIGINT/SIGTERM.
 *
 * Built statically: the pause image holds only this file.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define VERSION "3.9-berth"

static void sigdown(int signo)
{
	psignal(signo, "Shutting down, got signal");
	exit(0);
}

static void sigreap(int signo)
{
	(void)signo;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-v")) {
			printf("pause.c %s\n", VERSION);
			return 0;
		}
	}

	if (getpid() != 1)
		fprintf(stderr, "Warning: pause should be the first process\n");

	struct sigaction down = {.sa_handler = sigdown};
	struct sigaction reap = {.sa_handler = sigreap, .sa_flags = SA_NOCLDSTOP};
	if (sigaction(SIGINT, &down, NULL) < 0)
		return 1;
	if (sigaction(SIGTERM, &down, NULL) < 0)
		return 2;
	if (sigaction(SIGCHLD, &reap, NULL) < 0)
		return 3;

	for (;;)
		pause();
	fprintf(stderr, "Error: infinite loop terminated\n");
	return 42;
}
