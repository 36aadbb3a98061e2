/*
 * ipcs: minimal util-linux-compatible ipcs for the busybox stand-in image
 * (Debian's busybox has no ipcs applet). critest's HostIpc specs run
 * `ipcs -m` in a container and look for the decimal id of a segment made on
 * the host with `ipcmk -M`.
 *
 * Reads /proc/sysvipc/{shm,msg,sem}, which show the IPC namespace of the
 * reading process.
 *
 * Usage: ipcs [-a] [-m] [-q] [-s]   (no option: all three)
 */
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *owner(unsigned long uid, char *buf, size_t size)
{
	struct passwd *pw = getpwuid((uid_t)uid);
	if (pw && pw->pw_name)
		return pw->pw_name;
	snprintf(buf, size, "%lu", uid);
	return buf;
}

/* Opens a /proc/sysvipc file and skips its header line. */
static FILE *open_table(const char *path)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return NULL;
	char line[1024];
	if (!fgets(line, sizeof(line), f)) {
		fclose(f);
		return NULL;
	}
	return f;
}

static void show_shm(void)
{
	printf("\n------ Shared Memory Segments --------\n");
	printf("%-10s %-10s %-10s %-10s %-10s %-10s %-12s\n",
	       "key", "shmid", "owner", "perms", "bytes", "nattch", "status");
	FILE *f = open_table("/proc/sysvipc/shm");
	if (!f)
		goto out;
	char line[1024];
	while (fgets(line, sizeof(line), f)) {
		long key, id;
		unsigned long perms, size, cpid, lpid, nattch, uid;
		if (sscanf(line, "%ld %ld %lo %lu %lu %lu %lu %lu", &key, &id, &perms,
			   &size, &cpid, &lpid, &nattch, &uid) != 8)
			continue;
		char ubuf[32];
		printf("0x%08x %-10ld %-10s %-10lo %-10lu %-10lu %-6s %-6s\n",
		       (unsigned int)key, id, owner(uid, ubuf, sizeof(ubuf)), perms & 0777,
		       size, nattch, (perms & 01000) ? "dest" : " ",
		       (perms & 02000) ? "locked" : " ");
	}
	fclose(f);
out:
	printf("\n");
}

static void show_msg(void)
{
	printf("\n------ Message Queues --------\n");
	printf("%-10s %-10s %-10s %-10s %-12s %-12s\n",
	       "key", "msqid", "owner", "perms", "used-bytes", "messages");
	FILE *f = open_table("/proc/sysvipc/msg");
	if (!f)
		goto out;
	char line[1024];
	while (fgets(line, sizeof(line), f)) {
		long key, id;
		unsigned long perms, cbytes, qnum, lspid, lrpid, uid;
		if (sscanf(line, "%ld %ld %lo %lu %lu %lu %lu %lu", &key, &id, &perms,
			   &cbytes, &qnum, &lspid, &lrpid, &uid) != 8)
			continue;
		char ubuf[32];
		printf("0x%08x %-10ld %-10s %-10lo %-12lu %-12lu\n", (unsigned int)key, id,
		       owner(uid, ubuf, sizeof(ubuf)), perms & 0777, cbytes, qnum);
	}
	fclose(f);
out:
	printf("\n");
}

static void show_sem(void)
{
	printf("\n------ Semaphore Arrays --------\n");
	printf("%-10s %-10s %-10s %-10s %-10s\n", "key", "semid", "owner", "perms", "nsems");
	FILE *f = open_table("/proc/sysvipc/sem");
	if (!f)
		goto out;
	char line[1024];
	while (fgets(line, sizeof(line), f)) {
		long key, id;
		unsigned long perms, nsems, uid;
		if (sscanf(line, "%ld %ld %lo %lu %lu", &key, &id, &perms, &nsems, &uid) != 5)
			continue;
		char ubuf[32];
		printf("0x%08x %-10ld %-10s %-10lo %-10lu\n", (unsigned int)key, id,
		       owner(uid, ubuf, sizeof(ubuf)), perms & 0777, nsems);
	}
	fclose(f);
out:
	printf("\n");
}

int main(int argc, char **argv)
{
	int shm = 0, msg = 0, sem = 0, opt;

	while ((opt = getopt(argc, argv, "amqs")) != -1) {
		switch (opt) {
		case 'a': shm = msg = sem = 1; break;
		case 'm': shm = 1; break;
		case 'q': msg = 1; break;
		case 's': sem = 1; break;
		default:
			fprintf(stderr, "Usage: ipcs [-a] [-m] [-q] [-s]\n");
			return 1;
		}
	}
	if (!shm && !msg && !sem)
		shm = msg = sem = 1;

	if (msg)
		show_msg();
	if (shm)
		show_shm();
	if (sem)
		show_sem();
	return 0;
}
