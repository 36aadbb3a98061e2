"""Runs a command on a terminal of its own, as `kubectl exec -it`, `debug -it`
and `attach -it` need one (without a terminal on stdin kubectl drops -t).

    pty_run.py TIMEOUT INPUT COMMAND [ARGS...]

The terminal is 40 rows by 100 columns, so the remote side can check that the
size came through. INPUT (with \\n escapes) is typed once the remote shell
shows a prompt (or after 15 s). Prints what the terminal showed, without
carriage returns, and exits with COMMAND's status, or 124 on TIMEOUT, or 125
as soon as the output matches the regexp in $PTY_ABORT (a failure the
command would otherwise wait on forever).
"""
import fcntl
import os
import pty
import re
import select
import signal
import struct
import sys
import termios
import time

PROMPT = re.compile(rb"# $|# \x1b|command prompt")


def main():
    timeout = float(sys.argv[1])
    text = sys.argv[2].encode().decode("unicode_escape").encode()
    argv = sys.argv[3:]
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp(argv[0], argv)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    start = time.monotonic()
    out = b""
    typed = False
    abort = re.compile(os.environ["PTY_ABORT"].encode()) if os.environ.get("PTY_ABORT") else None
    while True:
        now = time.monotonic()
        if now - start > timeout:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            sys.stdout.write(out.decode(errors="replace").replace("\r", ""))
            print("\npty_run: timed out after %ss" % timeout)
            sys.exit(124)
        if abort and abort.search(out):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            sys.stdout.write(out.decode(errors="replace").replace("\r", ""))
            print("\npty_run: aborted on %r" % abort.pattern.decode())
            sys.exit(125)
        if not typed and (PROMPT.search(out) or now - start > 15):
            # Let the remote side settle (kubectl switches to raw mode, the
            # shell draws its prompt) before typing.
            time.sleep(0.5)
            os.write(fd, text)
            typed = True
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: the command closed the terminal
                data = b""
            if not data:
                break
            out += data
    _, status = os.waitpid(pid, 0)
    sys.stdout.write(out.decode(errors="replace").replace("\r", ""))
    sys.exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
