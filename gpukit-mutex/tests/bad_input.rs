//! Bad input is a clear typed error and changes nothing.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};

use gpukit_mutex::{parse_device_list, DeviceSource, Error, GpuMutex};

#[test]
fn malformed_device_lists() {
    for s in [
        "", " ", "0,,1", ",0", "0,", "a", "-1", "1.5", "0,0", "99999", "0;1", "1 2",
    ] {
        match parse_device_list(s) {
            Err(Error::InvalidDeviceList { input, reason }) => {
                assert_eq!(input, s);
                assert!(!reason.is_empty());
            }
            other => panic!("{s:?} gave {other:?}"),
        }
    }
    assert_eq!(parse_device_list("0, 2 ,3").expect("ok"), [0, 2, 3]);
    assert_eq!(parse_device_list("3,1").expect("ok"), [3, 1]);
}

#[test]
fn timeout_parser() {
    use gpukit_mutex::parse_timeout_secs;
    use std::time::Duration;
    assert_eq!(
        parse_timeout_secs("t", "0.25").expect("ok"),
        Duration::from_millis(250)
    );
    assert_eq!(
        parse_timeout_secs("t", " 600 ").expect("ok"),
        Duration::from_secs(600)
    );
    assert_eq!(parse_timeout_secs("t", "0").expect("ok"), Duration::ZERO);
    assert!(parse_timeout_secs("t", "1e19").is_ok());
    for bad in ["", "NaN", "inf", "-0.5", "1e20", "1e400", "x"] {
        assert!(
            matches!(
                parse_timeout_secs("t", bad),
                Err(Error::InvalidConfig { name: "t", .. })
            ),
            "{bad}"
        );
    }
}

#[test]
fn bad_requests_and_config_touch_nothing() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("locks");
    fs::create_dir(&dir).expect("mkdir");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o750)).expect("chmod");
    let b = || {
        GpuMutex::builder()
            .device_source(DeviceSource::None)
            .ignore_env()
            .lock_dir(&dir)
    };
    assert!(matches!(b().build(), Err(Error::NoVisibleDevices)));
    assert!(matches!(
        b().visible_devices([]).build(),
        Err(Error::InvalidDeviceList { .. })
    ));
    assert!(matches!(
        b().visible_devices([1, 1]).build(),
        Err(Error::InvalidDeviceList { .. })
    ));
    assert!(matches!(
        b().visible_devices([0]).num_devices(0).build(),
        Err(Error::ZeroDevices)
    ));
    assert!(matches!(
        b().visible_devices([0, 1]).num_devices(3).build(),
        Err(Error::TooManyDevices {
            requested: 3,
            visible: 2
        })
    ));
    let m = b().visible_devices([0, 1]).build().expect("build");
    assert!(matches!(m.acquire(0), Err(Error::ZeroDevices)));
    assert!(matches!(
        m.try_acquire(3),
        Err(Error::TooManyDevices { .. })
    ));
    assert!(matches!(
        m.acquire_timeout(5, std::time::Duration::from_secs(1)),
        Err(Error::TooManyDevices { .. })
    ));
    assert!(
        fs::read_dir(&dir).expect("ls").next().is_none(),
        "bad requests created files"
    );
    // A working acquire never changes the permissions of a directory the user named.
    drop(m.acquire(1).expect("acquire"));
    assert_eq!(
        fs::metadata(&dir).expect("md").permissions().mode() & 0o7777,
        0o750
    );
}

#[test]
fn unusable_lock_dirs() {
    let t = tempfile::tempdir().expect("tempdir");
    let file = t.path().join("file");
    fs::write(&file, b"").expect("write");
    let real = t.path().join("real");
    fs::create_dir(&real).expect("mkdir");
    let link = t.path().join("link");
    symlink(&real, &link).expect("symlink");
    for (p, why) in [
        (file.clone(), "not a directory"),
        (link.clone(), "symbolic link"),
        (t.path().join("missing/parent"), "parent"),
    ] {
        match GpuMutex::builder()
            .device_source(DeviceSource::None)
            .ignore_env()
            .visible_devices([0])
            .lock_dir(&p)
            .build()
        {
            Err(e @ Error::LockDir { .. }) => assert!(e.to_string().contains(why), "{e}"),
            other => panic!("{p:?}: {other:?}"),
        }
    }
    assert!(fs::read_dir(&real).expect("ls").next().is_none());
    // Not writable (only meaningful when not root: root bypasses permission bits).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        let ro = t.path().join("ro");
        fs::create_dir(&ro).expect("mkdir");
        fs::set_permissions(&ro, fs::Permissions::from_mode(0o555)).expect("chmod");
        assert!(matches!(
            GpuMutex::builder()
                .device_source(DeviceSource::None)
                .ignore_env()
                .visible_devices([0])
                .lock_dir(&ro)
                .build(),
            Err(Error::LockDir { .. })
        ));
    } else {
        eprintln!("note: running as root, read-only directory case not checked");
    }
}

#[test]
fn env_config_and_builder_precedence() {
    // Runs in its own process (integration test binary), but other tests in this binary run
    // in parallel threads: only this test touches GPUMUTEX_* variables.
    let t = tempfile::tempdir().expect("tempdir");
    // SAFETY (edition 2021: set_var is safe, but racy with concurrent getenv): no other test in
    // this binary reads these variables.
    std::env::set_var("GPUMUTEX_VISIBLE_DEVICES", "4,5,6");
    std::env::set_var("GPUMUTEX_NUM_DEVICES", "2");
    std::env::set_var("GPUMUTEX_LOCK_DIR", t.path());
    std::env::set_var("GPUMUTEX_TIMEOUT", "1.5");
    let m = GpuMutex::from_env().expect("env");
    assert_eq!(indices(m.config()), [4, 5, 6]);
    assert_eq!(m.config().num_devices, 2);
    assert_eq!(
        m.config().timeout,
        Some(std::time::Duration::from_millis(1500))
    );
    assert!(!m.config().lock_dir_is_default);
    let m = GpuMutex::builder()
        .device_source(DeviceSource::None)
        .visible_devices([1])
        .num_devices(1)
        .no_timeout()
        .build()
        .expect("b");
    assert_eq!(indices(m.config()), [1]);
    assert_eq!(m.config().timeout, None);
    std::env::set_var("GPUMUTEX_NUM_DEVICES", "two");
    assert!(matches!(
        GpuMutex::from_env(),
        Err(Error::InvalidConfig {
            name: "GPUMUTEX_NUM_DEVICES",
            ..
        })
    ));
    std::env::set_var("GPUMUTEX_NUM_DEVICES", "1");
    std::env::set_var("GPUMUTEX_TIMEOUT", "-3");
    assert!(matches!(
        GpuMutex::from_env(),
        Err(Error::InvalidConfig {
            name: "GPUMUTEX_TIMEOUT",
            ..
        })
    ));
    // Timeouts: nothing panics, and a refused value creates nothing.
    let missing = t.path().join("not-created");
    std::env::set_var("GPUMUTEX_LOCK_DIR", &missing);
    for bad in [
        "1e20", "NaN", "nan", "inf", "-inf", "-1", "1e400", "soon", "0x10",
    ] {
        std::env::set_var("GPUMUTEX_TIMEOUT", bad);
        match GpuMutex::from_env() {
            Err(
                e @ Error::InvalidConfig {
                    name: "GPUMUTEX_TIMEOUT",
                    ..
                },
            ) => assert!(e.to_string().contains(bad), "{e}"),
            other => panic!("{bad}: {other:?}"),
        }
        assert!(!missing.exists(), "{bad} created the lock directory");
    }
    std::env::set_var("GPUMUTEX_LOCK_DIR", t.path());
    std::env::set_var("GPUMUTEX_TIMEOUT", "1e19");
    let m = GpuMutex::from_env().expect("1e19 is a (very long) timeout");
    assert!(m.config().timeout.is_some());
    drop(m.acquire(1).expect("acquire with a 1e19 s timeout"));
    drop(
        m.acquire_timeout(1, std::time::Duration::MAX)
            .expect("Duration::MAX"),
    );
    std::env::set_var("GPUMUTEX_TIMEOUT", "");
    std::env::set_var("GPUMUTEX_JOB_ROOT", "not-a-pid");
    assert!(matches!(
        GpuMutex::from_env(),
        Err(Error::InvalidConfig {
            name: "GPUMUTEX_JOB_ROOT",
            ..
        })
    ));
    std::env::remove_var("GPUMUTEX_JOB_ROOT");
    std::env::set_var("GPUMUTEX_VISIBLE_DEVICES", "0,x");
    assert!(matches!(
        GpuMutex::from_env(),
        Err(Error::InvalidDeviceList { .. })
    ));
    for v in [
        "GPUMUTEX_VISIBLE_DEVICES",
        "GPUMUTEX_NUM_DEVICES",
        "GPUMUTEX_LOCK_DIR",
        "GPUMUTEX_TIMEOUT",
    ] {
        std::env::remove_var(v);
    }
}

fn indices(c: &gpukit_mutex::Config) -> Vec<u32> {
    c.visible_devices.iter().map(|d| d.index).collect()
}
