/*
 * nnp: stand-in for /usr/local/bin/nnp of e2e-test-images/nonewprivs:1.3.
 * Installed setuid root. With no_new_privs the setuid bit is ignored and the
 * effective uid stays the caller's; without it, it becomes 0.
 *
 * Built statically so that the setuid binary loads nothing from the image.
 */
#include <stdio.h>
#include <unistd.h>

int main(void)
{
	printf("Effective uid: %d\n", (int)geteuid());
	return 0;
}
