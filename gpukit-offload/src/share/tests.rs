use super::*;
use std::os::unix::fs::PermissionsExt;

fn never(_: &Path) -> bool {
    false
}

fn found(_: &str) -> Option<PathBuf> {
    Some(PathBuf::from("/usr/bin/nvidia-cuda-mps-control"))
}

/// A daemon is started only where nothing speaks against it, and each reason is its own.
#[test]
fn the_plan_starts_a_daemon_only_where_nothing_speaks_against_it() {
    let none = |_: &str| None::<OsString>;
    let start = Plan::Start(PathBuf::from("/usr/bin/nvidia-cuda-mps-control"));
    assert_eq!(
        plan(SharePolicy::Auto, GpuMode::Auto, none, never, found),
        start
    );
    assert_eq!(
        plan(SharePolicy::Auto, GpuMode::Always, none, never, found),
        start
    );
    let skip = |p: Plan| matches!(p, Plan::Skip(_));
    assert!(skip(plan(
        SharePolicy::Off,
        GpuMode::Auto,
        none,
        never,
        found
    )));
    assert!(skip(plan(
        SharePolicy::Auto,
        GpuMode::Off,
        none,
        never,
        found
    )));
    let named = |k: &str| (k == PIPE_ENV).then(|| OsString::from("/run/mps"));
    assert!(skip(plan(
        SharePolicy::Auto,
        GpuMode::Auto,
        named,
        never,
        found
    )));
    // an empty CUDA_MPS_PIPE_DIRECTORY names nothing
    let empty = |k: &str| (k == PIPE_ENV).then(OsString::new);
    assert_eq!(
        plan(SharePolicy::Auto, GpuMode::Auto, empty, never, found),
        start
    );
    let system = |p: &Path| p == Path::new("/tmp/nvidia-mps/control");
    assert!(skip(plan(
        SharePolicy::Auto,
        GpuMode::Auto,
        none,
        system,
        found
    )));
    assert!(skip(plan(
        SharePolicy::Auto,
        GpuMode::Auto,
        none,
        never,
        |_| None
    )));
}

/// A stand-in for nvidia-cuda-mps-control: `-f` makes a FIFO where the control socket goes,
/// records its pid and waits on the FIFO for a command (`start_body`, shell); the client mode
/// writes its standard input into the FIFO (`client_body`). Everything it does is appended to
/// `record`.
fn fake(dir: &Path, start_body: &str, client_body: &str) -> (PathBuf, PathBuf) {
    let record = dir.join("record");
    let prog = dir.join("nvidia-cuda-mps-control");
    std::fs::write(
        &prog,
        format!(
            "#!/bin/sh\nR='{}'\nif [ \"$1\" = -f ]; then\n  echo \"daemon $$ $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY\" >> \"$R\"\n{start_body}\nelse\n{client_body}\nfi\n",
            record.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    (prog, record)
}

const SERVES: &str = "  mkfifo \"$CUDA_MPS_PIPE_DIRECTORY/control\"\n  read cmd < \"$CUDA_MPS_PIPE_DIRECTORY/control\"\n  echo \"took $cmd\" >> \"$R\"";
const TELLS: &str = "  read cmd\n  echo \"$cmd\" > \"$CUDA_MPS_PIPE_DIRECTORY/control\"";

fn daemon_pid(record: &Path) -> i32 {
    let text = std::fs::read_to_string(record).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("daemon "))
        .and_then(|l| l.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap()
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// The daemon gets private pipe and log directories (mode 0700, in a fresh directory), the
/// program's variables name them, and `stop` tells it to quit, waits for it and removes them.
#[test]
fn a_daemon_gets_private_directories_and_quits_when_told() {
    let t = tempfile::tempdir().unwrap();
    let (prog, record) = fake(t.path(), SERVES, TELLS);
    let d = Daemon::start(&prog).unwrap();
    let env = d.env();
    assert_eq!(env[0].0, PIPE_ENV);
    assert_eq!(env[1].0, LOG_ENV);
    let top = env[0].1.parent().unwrap().to_path_buf();
    assert_eq!(env[1].1.parent().unwrap(), top);
    for p in [&top, &env[0].1, &env[1].1] {
        let mode = std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", p.display());
    }
    let pid = daemon_pid(&record);
    assert!(alive(pid));
    let named = std::fs::read_to_string(&record).unwrap();
    assert!(named.contains(&format!("{} {}", env[0].1.display(), env[1].1.display())));
    d.stop().unwrap();
    assert!(std::fs::read_to_string(&record)
        .unwrap()
        .contains("took quit"));
    assert!(!top.exists(), "the private directory is removed");
    assert!(!alive(pid));
}

/// Two daemons at once (two `offload run` of one user) never share a directory.
#[test]
fn two_daemons_get_two_directories() {
    let t = tempfile::tempdir().unwrap();
    let (prog, _) = fake(t.path(), SERVES, TELLS);
    let a = Daemon::start(&prog).unwrap();
    let b = Daemon::start(&prog).unwrap();
    assert_ne!(a.env()[0].1, b.env()[0].1);
    drop(a);
    b.stop().unwrap();
}

/// A daemon that exits at start, or opens no socket in time, is an error and leaves neither a
/// process nor a directory behind.
#[test]
fn a_daemon_that_fails_to_start_leaves_nothing_behind() {
    let t = tempfile::tempdir().unwrap();
    let (prog, record) = fake(t.path(), "  exit 3", TELLS);
    let e = Daemon::start(&prog).unwrap_err();
    assert!(e.to_string().contains("exited at start"), "{e}");
    let dir_of = |record: &Path| {
        let text = std::fs::read_to_string(record).unwrap();
        let l = text
            .lines()
            .find_map(|l| l.strip_prefix("daemon "))
            .unwrap();
        PathBuf::from(l.split(' ').nth(1).unwrap())
            .parent()
            .unwrap()
            .to_path_buf()
    };
    assert!(!dir_of(&record).exists());

    let t = tempfile::tempdir().unwrap();
    let (prog, record) = fake(t.path(), "  exec sleep 30", TELLS);
    let e = Daemon::start(&prog).unwrap_err();
    assert!(e.to_string().contains("no control socket"), "{e}");
    assert!(!alive(daemon_pid(&record)), "the silent daemon is killed");
    assert!(!dir_of(&record).exists());
}

/// A daemon that does not take `quit` is killed at stop, and the error says so.
#[test]
fn a_daemon_that_ignores_quit_is_killed() {
    let t = tempfile::tempdir().unwrap();
    let deaf = "  mkfifo \"$CUDA_MPS_PIPE_DIRECTORY/control\"\n  exec sleep 30";
    let (prog, record) = fake(t.path(), deaf, "  exit 1");
    let d = Daemon::start(&prog).unwrap();
    let top = d.env()[0].1.parent().unwrap().to_path_buf();
    let pid = daemon_pid(&record);
    let e = d.stop().unwrap_err();
    assert!(e.to_string().contains("quit"), "{e}");
    assert!(!alive(pid));
    assert!(!top.exists());
}

/// The search finds executable files only, in absolute directories, the first one first.
#[test]
fn the_search_finds_executables_in_absolute_directories_only() {
    let t = tempfile::tempdir().unwrap();
    let first = t.path().join("a");
    let second = t.path().join("b");
    std::fs::create_dir(&first).unwrap();
    std::fs::create_dir(&second).unwrap();
    let (a, _) = fake(&first, SERVES, TELLS);
    let (b, _) = fake(&second, SERVES, TELLS);
    let list = |dirs: &[&Path]| std::env::join_paths(dirs).unwrap();
    assert_eq!(find_in(&list(&[&first, &second]), CONTROL), Some(a.clone()));
    std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(find_in(&list(&[&first, &second]), CONTROL), Some(b.clone()));
    std::fs::remove_file(&b).unwrap();
    std::fs::create_dir(&b).unwrap();
    assert_eq!(find_in(&list(&[&first, &second]), CONTROL), None);
    // a relative entry is skipped even where it names the right place (from here: up to the
    // root, then down to `first`)
    std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o755)).unwrap();
    let here = std::env::current_dir().unwrap();
    let mut rel = PathBuf::new();
    for _ in here.components().skip(1) {
        rel.push("..");
    }
    rel.push(first.strip_prefix("/").unwrap());
    assert!(rel.is_relative() && rel.join(CONTROL).is_file());
    assert_eq!(find_in(&list(&[&rel]), CONTROL), None);
    assert_eq!(find_in(&list(&[&rel, &first]), CONTROL), Some(a));
}

/// A control program whose client mode never answers does not hold `stop`: the client is
/// killed after its bound, the daemon after it, and the error says so.
#[test]
fn a_control_program_that_never_answers_does_not_hold_the_stop() {
    let t = tempfile::tempdir().unwrap();
    let deaf = "  mkfifo \"$CUDA_MPS_PIPE_DIRECTORY/control\"\n  exec sleep 30";
    let (prog, record) = fake(t.path(), deaf, "  exec sleep 30");
    let d = Daemon::start(&prog).unwrap();
    let top = d.env()[0].1.parent().unwrap().to_path_buf();
    let pid = daemon_pid(&record);
    let t0 = Instant::now();
    let e = d.stop().unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    assert!(e.to_string().contains("no answer"), "{e}");
    assert!(!alive(pid));
    assert!(!top.exists());
}
