//! berth-shim end to end, as root, with real libcontainer containers.

mod support;

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use berth_shim_api::protocol::{
    ErrorCode, ExecRequest, ExecResult, Request, Response, RunState, SignalArg,
};
use support::{alive, is_rfc3339_nano, parse_record, wait_until, Options, TestContainer};

const T: Duration = Duration::from_secs(20);

fn exec(c: &TestContainer, args: &[&str], timeout_s: u64) -> ExecResult {
    let req = Request::Exec(ExecRequest {
        args: args.iter().map(|s| s.to_string()).collect(),
        env: vec![],
        cwd: None,
        user: None,
        timeout_s,
        max_output_bytes: None,
    });
    match c.call(&req) {
        Response::Exec(r) => r,
        other => panic!("exec {args:?}: {other:?}"),
    }
}

fn kill(c: &TestContainer, signal: SignalArg, all: bool) -> Response {
    c.call(&Request::Kill { signal, all })
}

fn error_code(r: &Response) -> Option<ErrorCode> {
    match r {
        Response::Error { code, .. } => Some(*code),
        _ => None,
    }
}

#[test]
fn create_start_log_and_exit_code() {
    let c = TestContainer::create(Options::new(&[
        "sh",
        "-c",
        "echo hello; echo oops >&2; exit 3",
    ]));
    assert_eq!(c.launcher_status, Some(0));
    let s = c.state();
    assert_eq!(s.status, RunState::Created);
    assert_eq!(s.pid, c.init_pid());
    let pid_file = std::fs::read_to_string(c.dir().join("pid")).expect("pid file");
    assert_eq!(pid_file, c.init_pid().to_string());
    let shim_pid = std::fs::read_to_string(c.dir().join("shim.pid")).expect("shim.pid");
    assert_eq!(shim_pid, c.shim_pid().to_string());
    assert!(!c.dir().join("exit").exists());

    c.start();
    // a second start is refused
    assert!(error_code(&c.call(&Request::Start)).is_some());
    let s = c.wait_stopped(T);
    assert_eq!(s.exit_code, Some(3));
    assert!(s.started_at.is_some());
    assert!(s.exited_at.as_deref().is_some_and(is_rfc3339_nano));

    let exit = c.exit_record();
    assert_eq!(exit.exit_code, 3);
    assert!(!exit.oom_killed);
    assert!(is_rfc3339_nano(&exit.exited_at), "{}", exit.exited_at);

    // the log is complete once the exit is visible
    let log = c.log();
    let recs: Vec<_> = log.lines().map(parse_record).collect();
    assert_eq!(recs.len(), 2, "{log}");
    for (ts, ..) in &recs {
        assert!(is_rfc3339_nano(ts), "bad timestamp {ts:?}");
    }
    assert!(
        recs.iter()
            .any(|r| (r.1, r.2, r.3) == ("stdout", "F", "hello")),
        "{log}"
    );
    assert!(
        recs.iter()
            .any(|r| (r.1, r.2, r.3) == ("stderr", "F", "oops")),
        "{log}"
    );

    // stopped: only kill-all, state and shutdown make sense
    assert_eq!(
        error_code(&kill(&c, SignalArg::Number(9), false)),
        Some(ErrorCode::NotRunning)
    );
    assert_eq!(
        error_code(&c.call(&Request::ReopenLog)),
        Some(ErrorCode::NotRunning)
    );
    assert_eq!(
        error_code(&c.call(&Request::Exec(ExecRequest {
            args: vec!["true".into()],
            env: vec![],
            cwd: None,
            user: None,
            timeout_s: 0,
            max_output_bytes: None,
        }))),
        Some(ErrorCode::NotRunning)
    );
}

#[test]
fn long_line_is_split_into_partial_records() {
    let c = TestContainer::create(Options::new(&[
        "sh",
        "-c",
        "head -c 40960 /dev/zero | tr '\\0' x; echo; printf tail-without-newline",
    ]));
    c.start();
    c.wait_stopped(T);
    let log = c.log();
    let recs: Vec<_> = log.lines().map(parse_record).collect();
    let shape: Vec<(&str, usize)> = recs.iter().map(|r| (r.2, r.3.len())).collect();
    assert_eq!(
        shape,
        [("P", 16384), ("P", 16384), ("F", 8192), ("P", 20)],
        "records: {:?}",
        recs.iter()
            .map(|r| (r.1, r.2, r.3.len()))
            .collect::<Vec<_>>()
    );
    assert!(recs[..3].iter().all(|r| r.3.bytes().all(|b| b == b'x')));
    assert_eq!(recs[3].3, "tail-without-newline");
}

#[test]
fn exec_in_a_running_container_then_sigkill() {
    let c = TestContainer::create(Options::new(&["sleep", "100"]));
    // exec before start: not running
    assert_eq!(
        error_code(&c.call(&Request::Exec(ExecRequest {
            args: vec!["true".into()],
            env: vec![],
            cwd: None,
            user: None,
            timeout_s: 0,
            max_output_bytes: None,
        }))),
        Some(ErrorCode::NotRunning)
    );
    c.start();
    assert_eq!(c.state().status, RunState::Running);

    let r = exec(&c, &["echo", "hi"], 10);
    assert_eq!(r.exit_code, 0);
    assert_eq!(r.stdout, b"hi\n");
    assert!(r.stderr.is_empty());
    assert!(!r.timed_out);

    let r = exec(
        &c,
        &["sh", "-c", "echo err >&2; echo $FOO; pwd; exit 5"],
        10,
    );
    assert_eq!(r.exit_code, 5);
    assert_eq!(r.stderr, b"err\n");
    assert_eq!(r.stdout, b"\n/\n");

    let req = Request::Exec(ExecRequest {
        args: vec!["sh".into(), "-c".into(), "echo $FOO; pwd".into()],
        env: vec!["FOO=bar".into()],
        cwd: Some("/tmp".into()),
        user: None,
        timeout_s: 10,
        max_output_bytes: Some(6),
    });
    match c.call(&req) {
        Response::Exec(r) => {
            assert_eq!(r.stdout, b"bar\n/t");
            assert!(r.stdout_truncated);
        }
        other => panic!("{other:?}"),
    }

    // the exec'd process sees the container: its pid namespace, its hostname
    let r = exec(&c, &["hostname"], 10);
    assert_eq!(r.stdout, b"shimtest\n");
    let r = exec(&c, &["sh", "-c", "cat /proc/1/cmdline"], 10);
    assert_eq!(r.stdout, b"sleep\x00100\x00");

    let t0 = Instant::now();
    let r = exec(&c, &["sleep", "10"], 1);
    assert!(r.timed_out);
    assert_eq!(r.exit_code, 137);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());

    let r = c.call(&Request::Exec(ExecRequest {
        args: vec!["/no/such/binary".into()],
        env: vec![],
        cwd: None,
        user: None,
        timeout_s: 5,
        max_output_bytes: None,
    }));
    assert_eq!(error_code(&r), Some(ErrorCode::Failed), "{r:?}");

    // execs leak neither fds in the shim nor files in libcontainer's state
    let fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", c.shim_pid()))
            .expect("shim fds")
            .count()
    };
    let before = fds();
    for _ in 0..20 {
        assert_eq!(exec(&c, &["true"], 10).exit_code, 0);
    }
    // (the count may include the connection of the last call until the
    // shim notices it closed)
    wait_until(T, || fds() <= before);
    let state_files: Vec<String> = std::fs::read_dir(c.state_root().join(&c.id))
        .expect("state dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !state_files.iter().any(|f| f.starts_with("tenant-notify-")),
        "{state_files:?}"
    );

    // the container still runs after all that
    assert_eq!(c.state().status, RunState::Running);
    assert_eq!(
        kill(&c, SignalArg::Name("SIGKILL".into()), false),
        Response::Ok
    );
    let s = c.wait_stopped(T);
    assert_eq!(s.exit_code, Some(137));
    assert_eq!(c.exit_record().exit_code, 137);
}

/// At its deadline an exec's process is killed, not what it started, as
/// containerd and CRI-O do: a step begun before the deadline still ends (a
/// probe script's last line still reaches the container's log).
#[test]
fn a_timed_out_exec_kills_its_process_not_what_it_started() {
    let c = TestContainer::create(Options::new(&["sleep", "100"]));
    c.start();
    let t0 = Instant::now();
    let r = exec(
        &c,
        &[
            "sh",
            "-c",
            "(sleep 2; echo ended > /tmp/step) & exec sleep 30",
        ],
        1,
    );
    assert!(r.timed_out);
    assert_eq!(r.exit_code, 137);
    // The child holds the output pipes: the answer waits for them a
    // moment only, not for the child.
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    wait_until(T, || {
        exec(&c, &["cat", "/tmp/step"], 10).stdout == b"ended\n"
    });
}

/// One line of `/proc/self/status` as an exec'd process sees it.
fn exec_status_field(c: &TestContainer, field: &str) -> String {
    let r = exec(c, &["grep", &format!("^{field}:"), "/proc/self/status"], 10);
    String::from_utf8_lossy(&r.stdout).trim().to_string()
}

#[test]
fn exec_runs_under_the_container_seccomp_profile() {
    let profile = serde_json::json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64"],
        "syscalls": [{"names": ["sethostname"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}],
    });
    // CAP_SYS_ADMIN, no_new_privs off: the filter loads as is
    let mut o = Options::new(&["sleep", "100"]);
    o.no_new_privileges = false;
    o.capabilities = Some(vec!["CAP_SYS_ADMIN".into(), "CAP_KILL".into()]);
    o.seccomp = Some(profile.clone());
    let c = TestContainer::create(o);
    c.start();
    let r = exec(&c, &["hostname", "changed"], 10);
    assert_ne!(r.exit_code, 0, "sethostname was allowed");
    assert_eq!(exec_status_field(&c, "Seccomp"), "Seccomp:\t2");
    assert_eq!(exec_status_field(&c, "NoNewPrivs"), "NoNewPrivs:\t0");
    assert_eq!(exec(&c, &["hostname"], 10).stdout, b"shimtest\n");

    // without CAP_SYS_ADMIN the kernel takes the filter only under
    // no_new_privs, which exec then sets
    let mut o = Options::new(&["sleep", "100"]);
    o.no_new_privileges = false;
    o.capabilities = Some(vec!["CAP_KILL".into(), "CAP_NET_BIND_SERVICE".into()]);
    o.seccomp = Some(profile);
    let c = TestContainer::create(o);
    c.start();
    assert_eq!(exec_status_field(&c, "Seccomp"), "Seccomp:\t2");
    assert_eq!(exec_status_field(&c, "NoNewPrivs"), "NoNewPrivs:\t1");

    // no profile, no filter, no no_new_privs
    let mut o = Options::new(&["sleep", "100"]);
    o.no_new_privileges = false;
    let c = TestContainer::create(o);
    c.start();
    assert_eq!(exec_status_field(&c, "Seccomp"), "Seccomp:\t0");
    assert_eq!(exec_status_field(&c, "NoNewPrivs"), "NoNewPrivs:\t0");
}

/// berth-spec's RuntimeDefault profile, as berthd writes it (the OCI
/// operand order), on a container without CAP_SYS_ADMIN: its `clone` rule
/// allows a plain fork only when the backend hands libcontainer the
/// operands swapped. Unswapped, the rule never matches and every fork,
/// the init's and an exec'd process's, fails with EPERM.
#[test]
fn the_default_profile_lets_the_container_and_its_execs_fork() {
    use berth_spec::capabilities::DEFAULT_CAPABILITIES;
    use berth_spec::seccomp_default::default_profile;
    let caps: libcontainer::oci_spec::runtime::Capabilities =
        DEFAULT_CAPABILITIES.into_iter().collect();
    let profile = serde_json::to_value(default_profile(&caps)).expect("profile");
    let names: Vec<String> = caps
        .iter()
        .filter_map(|c| serde_json::to_value(c).ok()?.as_str().map(String::from))
        .collect();
    assert_eq!(names.len(), DEFAULT_CAPABILITIES.len());
    let mut o = Options::new(&["sh", "-c", "echo forked | cat; sleep 100"]);
    o.capabilities = Some(names);
    o.seccomp = Some(profile);
    let c = TestContainer::create(o);
    let bundle_spec = std::fs::read_to_string(c.bundle().join("config.json")).expect("spec");
    assert!(
        bundle_spec.contains(r#""value": 2114060288"#),
        "the bundle's spec keeps the OCI order"
    );
    c.start();
    wait_until(T, || c.log().contains("forked"));
    let r = exec(&c, &["sh", "-c", "echo again | cat"], 10);
    assert_eq!(
        (r.exit_code, r.stdout.as_slice()),
        (0, &b"again\n"[..]),
        "{r:?}"
    );
    assert_eq!(exec_status_field(&c, "Seccomp"), "Seccomp:\t2");
}

/// runc as `scripts/containerd/install.sh` installs it (v1.5.2), or the
/// binary `BERTH_TEST_RUNC` names.
fn runc() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("BERTH_TEST_RUNC")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/usr/local/lib/berth-containerd/v2.4.2/runc".into());
    path.exists().then_some(path)
}

fn runc_state(runc: &std::path::Path, c: &TestContainer) -> std::process::Output {
    Command::new(runc)
        .arg("--root")
        .arg(c.state_root())
        .args(["state", &c.id])
        .output()
        .expect("run runc state")
}

/// `--runtime-binary`: runc makes the container (its state says so), the
/// shim stays the init's parent, and berth-spec's default profile in the
/// OCI order lets the container and its execs fork under runc as under
/// libcontainer.
#[test]
fn runc_as_the_runtime_binary() {
    let Some(runc) = runc() else {
        eprintln!("skipped: no runc (install it with scripts/containerd/install.sh, or set BERTH_TEST_RUNC)");
        return;
    };
    use berth_spec::capabilities::DEFAULT_CAPABILITIES;
    use berth_spec::seccomp_default::default_profile;
    let caps: libcontainer::oci_spec::runtime::Capabilities =
        DEFAULT_CAPABILITIES.into_iter().collect();
    let mut o = Options::new(&["sh", "-c", "echo forked | cat; sleep 100"]);
    o.capabilities = Some(
        caps.iter()
            .filter_map(|c| serde_json::to_value(c).ok()?.as_str().map(String::from))
            .collect(),
    );
    o.seccomp = Some(serde_json::to_value(default_profile(&caps)).expect("profile"));
    o.runtime_binary = Some(runc.clone());
    let c = TestContainer::create(o);
    let state = runc_state(&runc, &c);
    assert!(state.status.success(), "runc does not know it: {state:?}");
    let state: serde_json::Value = serde_json::from_slice(&state.stdout).expect("state");
    assert_eq!(state["status"], "created");
    assert_eq!(state["pid"], c.init_pid());
    assert!(!c.bundle().join("libcontainer").exists(), "no adapted spec");
    // runc's create has exited: the init is the shim's, its subreaper's.
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", c.init_pid())).expect("stat");
    let ppid: i32 = stat
        .rsplit(')')
        .next()
        .and_then(|rest| rest.split_whitespace().nth(1))
        .and_then(|p| p.parse().ok())
        .expect("ppid");
    assert_eq!(ppid, c.shim_pid());

    c.start();
    wait_until(T, || c.log().contains("forked"));
    let r = exec(&c, &["sh", "-c", "echo again | cat"], 10);
    assert_eq!(
        (r.exit_code, r.stdout.as_slice()),
        (0, &b"again\n"[..]),
        "{r:?}"
    );
    let r = exec(&c, &["sh", "-c", "exit 3"], 10);
    assert_eq!(r.exit_code, 3);

    assert_eq!(kill(&c, SignalArg::Number(9), false), Response::Ok);
    assert_eq!(c.wait_stopped(T).exit_code, Some(137));
    assert_eq!(c.call(&Request::Shutdown), Response::Ok);
    assert!(!runc_state(&runc, &c).status.success(), "runc still has it");
}

#[test]
fn exec_inherits_the_container_process() {
    let mut o = Options::new(&["sleep", "100"]);
    o.user = (1000, 1000, vec![5, 7]);
    o.capabilities = Some(vec!["CAP_KILL".into()]);
    let c = TestContainer::create(o);
    c.start();
    let r = exec(&c, &["id"], 10);
    assert_eq!(r.stdout, b"uid=1000 gid=1000 groups=5,7\n", "{r:?}");
    assert_eq!(exec_status_field(&c, "NoNewPrivs"), "NoNewPrivs:\t1");
    assert_eq!(exec_status_field(&c, "CapBnd"), "CapBnd:\t0000000000000020");
    let r = c.call(&Request::Exec(ExecRequest {
        args: vec!["id".into()],
        env: vec![],
        cwd: None,
        user: Some(berth_shim_api::protocol::ExecUser {
            uid: 0,
            gid: 0,
            additional_gids: vec![],
        }),
        timeout_s: 10,
        max_output_bytes: None,
    }));
    match r {
        Response::Exec(r) => assert_eq!(r.stdout, b"uid=0 gid=0\n"),
        other => panic!("{other:?}"),
    }
    // env: the container's, plus the request's
    let r = c.call(&Request::Exec(ExecRequest {
        args: vec!["sh".into(), "-c".into(), "echo $PATH $HOME $X".into()],
        env: vec!["X=1".into(), "HOME=/root".into()],
        cwd: None,
        user: None,
        timeout_s: 10,
        max_output_bytes: None,
    }));
    match r {
        Response::Exec(r) => assert_eq!(r.stdout, b"/bin /root 1\n"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn kill_all_and_bad_signals() {
    let c = TestContainer::create(Options::new(&["sh", "-c", "sleep 100 & sleep 100 & wait"]));
    c.start();
    assert_eq!(
        error_code(&kill(&c, SignalArg::Name("SIGNOPE".into()), false)),
        Some(ErrorCode::BadRequest)
    );
    // pid 1 of a pid namespace ignores SIGTERM without a handler
    assert_eq!(
        kill(&c, SignalArg::Name("TERM".into()), false),
        Response::Ok
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(c.state().status, RunState::Running);
    assert_eq!(kill(&c, SignalArg::Number(9), true), Response::Ok);
    let s = c.wait_stopped(T);
    assert_eq!(s.exit_code, Some(137));
}

#[test]
fn container_stdio_is_clean() {
    // fds 0-2 only (3 is ls's own directory fd), and stderr is a pipe, not
    // the shim's log
    let c = TestContainer::create(Options::new(&[
        "sh",
        "-c",
        "ls /proc/self/fd | tr '\\n' ' '; echo; readlink /proc/self/fd/2",
    ]));
    c.start();
    c.wait_stopped(T);
    let log = c.log();
    let out: Vec<&str> = log.lines().map(|l| parse_record(l).3).collect();
    assert_eq!(out[0].trim(), "0 1 2 3", "{log}");
    assert!(out[1].starts_with("pipe:["), "{log}");

    // the init starts with no blocked and no ignored signal (the shim blocks
    // SIGCHLD and ignores SIGPIPE; the test harness may ignore more)
    let c = TestContainer::create(Options::new(&[
        "grep",
        "-E",
        "^Sig(Blk|Ign)",
        "/proc/self/status",
    ]));
    c.start();
    c.wait_stopped(T);
    let log = c.log();
    let out: Vec<&str> = log.lines().map(|l| parse_record(l).3).collect();
    assert_eq!(
        out,
        ["SigBlk:\t0000000000000000", "SigIgn:\t0000000000000000"],
        "{log}"
    );
}

#[test]
fn reopen_log_after_rotation() {
    let c = TestContainer::create(Options::new(&[
        "sh",
        "-c",
        "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.05; done",
    ]));
    c.start();
    wait_until(T, || c.log().lines().count() >= 3);
    let rotated = c.log_path().with_extension("log.1");
    std::fs::rename(c.log_path(), &rotated).expect("rotate");
    assert_eq!(c.call(&Request::ReopenLog), Response::Ok);
    wait_until(T, || c.log().lines().count() >= 3);
    let old = std::fs::read_to_string(&rotated).expect("rotated");
    let last_old = old.lines().last().map(|l| parse_record(l).3.to_string());
    let first_new = c
        .log()
        .lines()
        .next()
        .map(|l| parse_record(l).3.to_string());
    let n = |s: &Option<String>| -> i64 {
        s.as_deref()
            .and_then(|t| t.strip_prefix("tick "))
            .and_then(|t| t.parse().ok())
            .expect("tick line")
    };
    assert_eq!(n(&first_new), n(&last_old) + 1, "no line lost or repeated");
}

#[test]
fn tty_container_logs_as_stdout() {
    let mut o = Options::new(&["sh", "-c", "echo hi; tty; echo oops >&2"]);
    o.tty = true;
    let c = TestContainer::create(o);
    c.start();
    let s = c.wait_stopped(T);
    assert_eq!(s.exit_code, Some(0));
    let log = c.log();
    let recs: Vec<_> = log.lines().map(parse_record).collect();
    assert!(recs.iter().all(|r| r.1 == "stdout"), "{log}");
    let contents: Vec<&str> = recs.iter().map(|r| r.3).collect();
    assert_eq!(contents[0], "hi", "{log}");
    assert!(contents[1].starts_with("/dev/pts/"), "{log}");
    assert_eq!(contents[2], "oops", "{log}");
    assert!(!c.dir().join("console.sock").exists());
}

#[test]
fn create_failure_is_reported_and_cleaned_up() {
    let mut c = TestContainer::prepare(Options::new(&["/no/such/binary"]));
    let ready = c.spawn_shim();
    assert!(!ready.ok);
    assert_eq!(c.launcher_status, Some(1));
    let err = ready.error.unwrap_or_default();
    assert!(err.contains("creating the container"), "{err}");
    assert!(
        !c.state_root().join(&c.id).exists(),
        "libcontainer state left behind"
    );
    assert!(c.cgroup_dirs().is_empty(), "cgroup left behind");
    assert!(!c.socket().exists());

    // a bundle that does not exist fails before the fork
    let mut c2 = TestContainer::prepare(Options::new(&["true"]));
    std::fs::remove_dir_all(c2.bundle()).expect("rm bundle");
    let ready = c2.spawn_shim();
    assert!(!ready.ok);
    assert!(ready.error.unwrap_or_default().contains("bundle"));
}

#[test]
fn shutdown_removes_state_and_cgroup() {
    let c = TestContainer::create(Options::new(&["sleep", "100"]));
    c.start();
    assert!(!c.cgroup_dirs().is_empty());
    assert!(c.state_root().join(&c.id).exists());
    let shim = c.shim_pid();
    // shutdown of a running container kills it first
    assert_eq!(c.call(&Request::Shutdown), Response::Ok);
    assert!(!c.state_root().join(&c.id).exists());
    assert!(c.cgroup_dirs().is_empty(), "{:?}", c.cgroup_dirs());
    assert!(!c.socket().exists());
    assert_eq!(c.exit_record().exit_code, 137);
    wait_until(T, || !alive(shim));
    assert!(!alive(c.init_pid()));
}

#[test]
fn shim_survives_its_parent_and_the_container_survives_the_shim() {
    let c = TestContainer::prepare(Options::new(&[
        "sh",
        "-c",
        "while true; do echo tick; sleep 0.05; done",
    ]));
    // a berthd stand-in: its own process group, runs the shim, then lingers
    let ready_file = c.tmp.path().join("ready.json");
    let script = format!("\"$0\" \"$@\" > {}; sleep 600", ready_file.display());
    let mut parent = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(support::SHIM)
        .args(c.shim_args())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("spawn parent");
    wait_until(T, || {
        std::fs::read_to_string(&ready_file).is_ok_and(|t| t.ends_with('\n'))
    });
    let ready: berth_shim_api::protocol::Ready =
        serde_json::from_str(std::fs::read_to_string(&ready_file).expect("ready").trim())
            .expect("ready json");
    assert!(ready.ok, "{ready:?}");
    let mut c = c;
    c.ready = Some(ready.clone());
    let shim = c.shim_pid();

    // the daemon left the parent's session and process group
    let parent_pid = parent.id() as i32;
    let sid =
        |pid: i32| nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(pid))).expect("getsid");
    assert_ne!(sid(shim), sid(parent_pid));

    c.start();
    wait_until(T, || c.log().lines().count() >= 2);
    // berthd dies, with its whole process group
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(parent_pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("killpg");
    let _ = parent.wait();
    let before = c.log().lines().count();
    std::thread::sleep(Duration::from_millis(500));
    assert!(alive(shim), "shim died with its parent");
    assert!(c.log().lines().count() > before, "container output stopped");
    assert_eq!(c.state().status, RunState::Running);

    // the shim dies: the container does not (it gets SIGPIPE at its next
    // write, as with any runtime whose log reader is gone; a silent one
    // keeps running)
    let quiet = TestContainer::create(Options::new(&["sleep", "100"]));
    quiet.start();
    assert!(support::kill(quiet.shim_pid(), 9));
    wait_until(T, || !alive(quiet.shim_pid()));
    std::thread::sleep(Duration::from_millis(200));
    assert!(alive(quiet.init_pid()), "container died with its shim");
}

#[test]
fn ten_containers_in_parallel() {
    let handles: Vec<_> = (0..10)
        .map(|i| {
            std::thread::spawn(move || {
                let msg = format!("container {i}");
                let c = TestContainer::create(Options::new(&["echo", &msg]));
                c.start();
                let s = c.wait_stopped(T);
                assert_eq!(s.exit_code, Some(0));
                let log = c.log();
                assert_eq!(
                    log.lines().map(|l| parse_record(l).3).collect::<Vec<_>>(),
                    [msg]
                );
                c.id.clone()
            })
        })
        .collect();
    let mut ids: Vec<String> = handles
        .into_iter()
        .map(|h| h.join().expect("container thread"))
        .collect();
    ids.dedup();
    assert_eq!(ids.len(), 10);
}

#[test]
fn oom_kill_is_reported() {
    let mut o = Options::new(&["sh", "-c", "exec tail /dev/zero"]);
    o.memory_limit = Some(32 * 1024 * 1024);
    let c = TestContainer::create(o);
    c.start();
    let s = c.wait_stopped(Duration::from_secs(60));
    assert_eq!(s.exit_code, Some(137), "{}", c.shim_log());
    assert!(s.oom_killed);
    assert!(c.exit_record().oom_killed);
}
