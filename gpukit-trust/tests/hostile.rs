//! What other users can do to a directory the caller relies on, with real processes running as
//! two unprivileged users (a victim and an attacker), real FIFOs, links and sparse files.
//! Needs root to start processes as other users; every test skips with a printed reason
//! otherwise.

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gpukit_trust::{read_bounded, walk, Distrust, Error, Walk};

const VICTIM: u32 = 64301;
const ATTACKER: u32 = 64302;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} not set"))
}

/// One line a child reports about walking a path.
fn walk_line(path: &Path, how: Walk) -> String {
    match walk(path, how) {
        Ok(w) => format!(
            "ok {} distrust={}",
            w.dir.path().display(),
            w.distrust
                .map_or("none".into(), |(p, r)| format!("{}: {r}", p.display()))
        ),
        Err(e @ Error::Untrusted { .. }) => format!("untrusted {e}"),
        Err(e) => format!("err {e}"),
    }
}

/// Entry point of re-executed children; a no-op in a normal test run.
#[test]
fn child_entry() {
    let Ok(role) = std::env::var("GKT_ROLE") else {
        return;
    };
    let dir = PathBuf::from(env("GKT_DIR"));
    let mut out = Vec::new();
    match role.as_str() {
        "walk" => out.push(walk_line(&dir, Walk::EXISTING)),
        "walk_create" => out.push(walk_line(&dir.join("mine"), Walk::CREATE_PRIVATE)),
        "walk_report" => out.push(walk_line(&dir, Walk::REPORT)),
        // Plants hostile things in a shared directory.
        "plant" => {
            let at = |n: &str| dir.join(n);
            let fifo = CString::new(at("fifo").as_os_str().as_bytes()).expect("c");
            // SAFETY: a valid NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o666) }, 0);
            symlink(env("GKT_TARGET"), at("link")).expect("link");
            symlink(env("GKT_TARGET"), at("victims-next")).expect("link");
            let sparse = fs::File::create(at("sparse")).expect("sparse");
            sparse.set_len(8 << 30).expect("set_len");
            fs::write(at("theirs"), b"attacker's bytes").expect("theirs");
            fs::set_permissions(at("theirs"), fs::Permissions::from_mode(0o666)).expect("chmod");
            fs::create_dir(at("subdir")).expect("subdir");
            out.push("planted".into());
        }
        // Looks at what was planted, the way a careful reader would.
        "inspect" => {
            let d = walk(&dir, Walk::EXISTING)
                .expect("shared dir is trusted")
                .dir;
            for name in ["fifo", "link", "sparse", "theirs", "subdir"] {
                let line = match d.open_entry(name) {
                    Ok(None) => "not a regular file".to_string(),
                    Ok(Some((f, m))) => match read_bounded(&f, &m, 4096) {
                        Ok(Some(b)) => format!("read {} bytes uid={}", b.len(), m.uid),
                        Ok(None) => format!("too large ({} bytes) uid={}", m.size, m.uid),
                        Err(e) => format!("read error {e}"),
                    },
                    Err(e) if e.raw_os_error() == Some(libc::ELOOP) => "a link".to_string(),
                    Err(e) => format!("error {e}"),
                };
                out.push(format!("{name}: {line}"));
            }
            let created = match d.create_new("victims-next", 0o600) {
                Ok(_) => "created".to_string(),
                Err(e) => format!("refused {:?}", e.kind()),
            };
            out.push(format!("create victims-next: {created}"));
            let removed = d.unlink_if("theirs", |m| m.uid == gpukit_trust::euid());
            out.push(format!("unlink_if theirs: {removed}"));
        }
        other => panic!("unknown role {other}"),
    }
    fs::write(env("GKT_OUT"), out.join("\n") + "\n").expect("report");
}

/// Runs this binary as `uid` in `role` and returns its report (killing it after 30 s: a child
/// that blocked is a failure, not a hang).
fn run_as(uid: u32, role: &str, dir: &Path, extra: &[(&str, &Path)]) -> String {
    let out = tempfile::NamedTempFile::new().expect("out file");
    fs::set_permissions(out.path(), fs::Permissions::from_mode(0o666)).expect("chmod");
    let mut cmd = Command::new(std::env::current_exe().expect("current_exe"));
    cmd.args([
        "--exact",
        "child_entry",
        "--nocapture",
        "--test-threads=1",
        "-q",
    ])
    .env("GKT_ROLE", role)
    .env("GKT_DIR", dir)
    .env("GKT_OUT", out.path())
    .uid(uid)
    .gid(uid)
    .stdout(Stdio::null());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("child runs");
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if t.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{role} as uid {uid} blocked for 30 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(status.success(), "{role} as uid {uid}: {status}");
    fs::read_to_string(out.path()).expect("report")
}

/// Whether this process can start processes as other users; prints why the test is skipped
/// when it cannot.
/// Under `GPUKIT_REQUIRE_ROOT=1` (CI runs as root) the test fails instead of being skipped.
fn root(test: &str) -> bool {
    if gpukit_trust::euid() != 0 {
        let why = "needs root to run children as two unprivileged users";
        if std::env::var("GPUKIT_REQUIRE_ROOT").is_ok_and(|v| v == "1") {
            panic!("{test} could not run: {why} (GPUKIT_REQUIRE_ROOT=1 requires it to)");
        }
        eprintln!("SKIPPED {test}: {why}");
        return false;
    }
    true
}

/// A fresh directory every test user can search: `<tmp>` (root, 0755).
fn shared_tmp() -> tempfile::TempDir {
    let t = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    t
}

fn mkdir(path: &Path, uid: u32, gid: u32, mode: u32) -> PathBuf {
    fs::create_dir(path).expect("mkdir");
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).expect("chown");
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
    fs::canonicalize(path).expect("canonicalize")
}

#[test]
fn a_directory_of_another_user_is_trusted_by_its_owner_only() {
    if !root("a_directory_of_another_user_is_trusted_by_its_owner_only") {
        return;
    }
    let t = shared_tmp();
    // Theirs, and sticky and world-writable: anybody could create in it, yet its owner could
    // remove anything there.
    let theirs = mkdir(&t.path().join("theirs"), VICTIM, VICTIM, 0o1777);
    let roots = mkdir(&t.path().join("roots"), 0, 0, 0o755);
    // Root trusts nobody's directory but its own.
    match walk(&theirs, Walk::EXISTING) {
        Err(Error::Untrusted { path, reason }) => {
            assert_eq!(path, theirs);
            assert_eq!(
                reason,
                Distrust::Owner {
                    owner: VICTIM,
                    me: 0
                }
            );
        }
        other => panic!("{other:?}"),
    }
    let own = run_as(VICTIM, "walk", &theirs, &[]);
    assert!(own.starts_with("ok "), "its owner: {own}");
    let other = run_as(ATTACKER, "walk", &theirs, &[]);
    assert!(
        other.starts_with("untrusted ") && other.contains(&format!("owned by uid {VICTIM}")),
        "another user: {other}"
    );
    // Nothing is created inside it by another user, although its mode would allow that.
    let create = run_as(ATTACKER, "walk_create", &theirs, &[]);
    assert!(create.starts_with("untrusted "), "{create}");
    assert!(!theirs.join("mine").exists());
    // A report still reaches it, and says why it is not trusted.
    let report = run_as(ATTACKER, "walk_report", &theirs, &[]);
    assert!(
        report.starts_with("ok ") && report.contains(&format!("uid {VICTIM}")),
        "{report}"
    );
    // Root's directories are everybody's to trust.
    let r = run_as(ATTACKER, "walk", &roots, &[]);
    assert!(r.starts_with("ok "), "{r}");
}

#[test]
fn directories_others_may_write_are_trusted_only_with_the_sticky_bit() {
    if !root("directories_others_may_write_are_trusted_only_with_the_sticky_bit") {
        return;
    }
    let t = shared_tmp();
    // (mode, group, trusted by the victim, reason when not)
    for (mode, gid, trusted, why) in [
        (0o777, 0, false, "writable by everybody"),
        (0o775, VICTIM, false, "writable by its group"),
        (0o1777, 0, true, ""),
        (0o1775, VICTIM, true, ""),
    ] {
        let d = mkdir(&t.path().join(format!("m{mode:o}")), 0, gid, mode);
        let line = run_as(VICTIM, "walk_create", &d, &[]);
        if trusted {
            assert!(line.starts_with("ok "), "{mode:o}: {line}");
            let md = fs::metadata(d.join("mine")).expect("created");
            assert_eq!((md.uid(), md.mode() & 0o7777), (VICTIM, 0o700), "{mode:o}");
        } else {
            assert!(
                line.starts_with("untrusted ") && line.contains(why),
                "{mode:o}: {line}"
            );
            assert!(!d.join("mine").exists(), "{mode:o}: created anyway");
        }
    }
}

#[test]
fn a_link_another_user_planted_leads_nowhere_untrusted() {
    if !root("a_link_another_user_planted_leads_nowhere_untrusted") {
        return;
    }
    let t = shared_tmp();
    let shared = mkdir(&t.path().join("shared"), 0, 0, 0o1777);
    let open = mkdir(&t.path().join("open"), 0, 0, 0o777);
    let attackers = mkdir(&t.path().join("attackers"), ATTACKER, ATTACKER, 0o755);
    let victims = mkdir(&t.path().join("victims"), VICTIM, VICTIM, 0o700);
    // In a directory anybody may write without the sticky bit, a link is never followed.
    symlink(&victims, open.join("link")).expect("symlink");
    std::os::unix::fs::lchown(open.join("link"), Some(ATTACKER), Some(ATTACKER)).expect("lchown");
    let l = run_as(VICTIM, "walk", &open.join("link"), &[]);
    assert!(
        l.starts_with("untrusted ") && l.contains(&format!("{}:", open.display())),
        "{l}"
    );
    // In a sticky shared directory: a link to the attacker's own directory leads to a
    // directory the victim does not trust.
    run_as(ATTACKER, "plant", &shared, &[("GKT_TARGET", &attackers)]);
    let l = run_as(VICTIM, "walk_create", &shared.join("link"), &[]);
    assert!(
        l.starts_with("untrusted ") && l.contains(&format!("owned by uid {ATTACKER}")),
        "{l}"
    );
    assert!(!attackers.join("mine").exists());
}

#[test]
fn a_link_another_user_owns_in_a_sticky_directory_is_not_followed() {
    if !root("a_link_another_user_owns_in_a_sticky_directory_is_not_followed") {
        return;
    }
    let t = shared_tmp();
    let shared = mkdir(&t.path().join("shared"), 0, 0, 0o1777);
    let group = mkdir(&t.path().join("group"), 0, VICTIM, 0o1770);
    // Two directories the victim trusts (root's, sticky): the attacker's link may point at
    // either, and re-point it between two of the victim's processes, so that they meet in
    // different directories (for gpukit-mutex: two jobs on one GPU). The kernel's own path
    // resolution refuses such a link (fs.protected_symlinks); the walk must too.
    let one = mkdir(&t.path().join("one"), 0, 0, 0o1777);
    run_as(ATTACKER, "plant", &shared, &[("GKT_TARGET", &one)]);
    let l = run_as(VICTIM, "walk", &shared.join("link"), &[]);
    assert!(
        l.starts_with("untrusted ")
            && l.contains(&format!("{}:", shared.join("link").display()))
            && l.contains(&format!("symbolic link owned by uid {ATTACKER}")),
        "{l}"
    );
    // The same in a sticky directory only a group may write.
    symlink(&one, group.join("link")).expect("symlink");
    std::os::unix::fs::lchown(group.join("link"), Some(ATTACKER), Some(ATTACKER)).expect("lchown");
    let l = run_as(VICTIM, "walk", &group.join("link"), &[]);
    assert!(l.starts_with("untrusted "), "{l}");
    // A report still gets there, and says why.
    let l = run_as(VICTIM, "walk_report", &shared.join("link"), &[]);
    assert!(
        l.starts_with(&format!("ok {}", one.display())) && l.contains("symbolic link"),
        "{l}"
    );
    // The victim's own link, and one of the directory's owner, are followed.
    symlink(&one, shared.join("victims")).expect("symlink");
    std::os::unix::fs::lchown(shared.join("victims"), Some(VICTIM), Some(VICTIM)).expect("lchown");
    symlink(&one, shared.join("roots")).expect("symlink");
    for name in ["victims", "roots"] {
        let l = run_as(VICTIM, "walk", &shared.join(name), &[]);
        assert_eq!(
            l.trim(),
            format!("ok {} distrust=none", one.display()),
            "{name}"
        );
    }
}

#[test]
fn files_another_user_planted_are_opened_without_harm() {
    if !root("files_another_user_planted_are_opened_without_harm") {
        return;
    }
    let t = shared_tmp();
    let shared = mkdir(&t.path().join("shared"), 0, 0, 0o1777);
    let precious = t.path().join("precious");
    fs::write(&precious, b"the victim's").expect("write");
    std::os::unix::fs::chown(&precious, Some(VICTIM), Some(VICTIM)).expect("chown");
    let p = run_as(ATTACKER, "plant", &shared, &[("GKT_TARGET", &precious)]);
    assert_eq!(p.trim(), "planted");
    let r = run_as(VICTIM, "inspect", &shared, &[]);
    let line = |name: &str| {
        r.lines()
            .find(|l| l.starts_with(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no line for {name}: {r}"))
            .to_string()
    };
    // A FIFO neither blocks (the child would have been killed) nor passes for a file.
    assert_eq!(line("fifo"), "fifo: not a regular file");
    assert_eq!(line("subdir"), "subdir: not a regular file");
    // A link is not followed.
    assert_eq!(line("link"), "link: a link");
    // An 8 GiB sparse file is refused by its size, unread.
    assert_eq!(
        line("sparse"),
        format!("sparse: too large ({} bytes) uid={ATTACKER}", 8u64 << 30)
    );
    // A small file is read, and its owner is reported for the caller to judge.
    assert_eq!(
        line("theirs"),
        format!("theirs: read 16 bytes uid={ATTACKER}")
    );
    // A link planted under the name the victim creates next: the creation fails, the link's
    // target is untouched.
    assert_eq!(
        line("create victims-next"),
        "create victims-next: refused AlreadyExists"
    );
    assert_eq!(fs::read(&precious).expect("read"), b"the victim's");
    // The attacker's file is not removed by a removal meant for the victim's own files.
    assert_eq!(line("unlink_if theirs"), "unlink_if theirs: false");
    assert!(shared.join("theirs").exists());
}
