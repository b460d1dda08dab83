//! Device identity on clusters, with real processes and simulated device sets (no GPU): a fake
//! `/proc/driver/nvidia/gpus` tree (`GPUMUTEX_DEVICE_SOURCE=proc:<dir>`) and a fake
//! `nvidia-smi` program on `PATH` (`GPUMUTEX_DEVICE_SOURCE=nvidia-smi`). Each child reads its
//! configuration from the environment, as a job under Slurm or Kubernetes does.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gpukit_mutex::{DeviceSource, GpuMutex, VisibleSpec};

mod common;
use common::{append, read_lines, wait_until, Reaper};

/// The UUID the fake tree gives GPU `i`.
fn uuid(i: u32) -> String {
    format!("GPU-{i:08x}-1111-2222-3333-{:012x}", 0xabc000 + i)
}

/// A fake `/proc/driver/nvidia/gpus` with `models.len()` GPUs (listed out of bus order).
fn proc_tree(root: &Path, models: &[&str]) -> PathBuf {
    let dir = root.join("gpus");
    for (i, model) in models.iter().enumerate().rev() {
        let bus = format!("0000:{:02x}:00.0", 0x18 + i * 0x10);
        let d = dir.join(&bus);
        fs::create_dir_all(&d).expect("mkdir");
        fs::write(
            d.join("information"),
            format!(
                "Model: \t\t {model}\nIRQ:   \t\t 42\nGPU UUID: \t {}\nVideo BIOS: \t ??.??\n\
                 Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\n\
                 Bus Location: \t {bus}\nDevice Minor: \t {i}\nGPU Excluded:\t No\n",
                uuid(i as u32)
            ),
        )
        .expect("information");
    }
    dir
}

/// Child role: acquire from the environment, report, hold until GMT_RELEASE exists.
#[test]
fn child_entry() {
    let Ok(tag) = std::env::var("GMT_TAG") else {
        return;
    };
    let out = PathBuf::from(std::env::var("GMT_OUT").expect("out"));
    let release = PathBuf::from(std::env::var("GMT_RELEASE").unwrap_or_default());
    let r = GpuMutex::builder().build().and_then(|m| m.lock());
    match r {
        Ok(g) => {
            let env: Vec<String> = g
                .child_env()
                .into_iter()
                .filter(|(k, _)| k != "GPUMUTEX_LOCK_DIR")
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let keys: Vec<String> = g.granted().iter().map(|d| d.key.clone()).collect();
            append(
                &out,
                &format!(
                    "{tag} ok devs={:?} keys={} {}",
                    g.devices(),
                    keys.join(","),
                    env.join(" ")
                ),
            );
            while !release.as_os_str().is_empty() && !release.exists() {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        Err(e) => append(&out, &format!("{tag} err {e}")),
    }
}

struct Setup {
    _t: tempfile::TempDir,
    root: PathBuf,
    locks: PathBuf,
    out: PathBuf,
    source: String,
}

fn setup(models: &[&str]) -> Setup {
    let t = tempfile::tempdir().expect("tempdir");
    let root = t.path().to_path_buf();
    let locks = root.join("locks");
    fs::create_dir(&locks).expect("mkdir");
    let tree = proc_tree(&root, models);
    Setup {
        out: root.join("out.txt"),
        source: format!("proc:{}", tree.display()),
        locks,
        root,
        _t: t,
    }
}

impl Setup {
    /// A child with this environment (`vars`: CUDA_VISIBLE_DEVICES and friends, GPUMUTEX_*).
    fn child(&self, tag: &str, vars: &[(&str, &str)]) -> Command {
        let mut c = Command::new(std::env::current_exe().expect("exe"));
        c.args(["--exact", "child_entry", "--nocapture", "-q"])
            .env("GMT_TAG", tag)
            .env("GMT_OUT", &self.out)
            .env("GPUMUTEX_LOCK_DIR", &self.locks)
            .env("GPUMUTEX_DEVICE_SOURCE", &self.source)
            .env("GPUMUTEX_TIMEOUT", "20")
            .env_remove("GPUMUTEX_VISIBLE_DEVICES")
            .env_remove("GPUMUTEX_NUM_DEVICES")
            .env_remove("GPUMUTEX_JOB_ROOT")
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("NVIDIA_VISIBLE_DEVICES")
            .env_remove("CUDA_DEVICE_ORDER")
            .stdout(Stdio::null());
        for (k, v) in vars {
            c.env(k, v);
        }
        c
    }

    fn run(&self, tag: &str, vars: &[(&str, &str)]) -> String {
        self.child(tag, vars).status().expect("child");
        self.line(tag)
    }

    fn spawn_holding(&self, tag: &str, release: &Path, vars: &[(&str, &str)]) -> Child {
        let c = self
            .child(tag, vars)
            .env("GMT_RELEASE", release)
            .spawn()
            .expect("child");
        wait_until(tag, Duration::from_secs(20), || {
            read_lines(&self.out)
                .iter()
                .any(|l| l.starts_with(&format!("{tag} ")))
        });
        c
    }

    fn line(&self, tag: &str) -> String {
        read_lines(&self.out)
            .into_iter()
            .find(|l| l.starts_with(&format!("{tag} ")))
            .unwrap_or_else(|| panic!("no line for {tag}"))
    }
}

/// Two jobs with different `CUDA_VISIBLE_DEVICES` views name the same physical GPU by
/// different indices (device 1 of `2,3` and device 0 of `3`): they must exclude each other,
/// while another GPU stays free. Before: each locked its own index, and both ran on GPU 3.
/// Removes the inherited device view from this test process (a GPU container sets
/// `NVIDIA_VISIBLE_DEVICES`), for checks that read the simulated machine's status in-process.
/// std's environment functions take its own lock, so concurrent readers in other test threads
/// see either value.
fn without_inherited_view() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for v in [
            "CUDA_VISIBLE_DEVICES",
            "NVIDIA_VISIBLE_DEVICES",
            "CUDA_DEVICE_ORDER",
        ] {
            std::env::remove_var(v);
        }
    });
}

#[test]
fn two_views_of_one_gpu_exclude_each_other() {
    without_inherited_view();
    let s = setup(&["NVIDIA H200"; 4]);
    let release = s.root.join("release");
    let mut kids = Reaper(vec![s.spawn_holding(
        "A",
        &release,
        &[
            ("CUDA_VISIBLE_DEVICES", "2,3"),
            ("GPUMUTEX_VISIBLE_DEVICES", "1"),
        ],
    )]);
    let a = s.line("A");
    assert!(
        a.contains(&format!("keys={}", uuid(3)))
            && a.contains("devs=[1]")
            && a.contains("CUDA_VISIBLE_DEVICES=3 ")
            && a.contains("GPUMUTEX_VISIBLE_DEVICES=0 "),
        "{a}"
    );
    let t = Instant::now();
    let b = s.run(
        "B",
        &[
            ("CUDA_VISIBLE_DEVICES", "3"),
            ("GPUMUTEX_VISIBLE_DEVICES", "0"),
            ("GPUMUTEX_TIMEOUT", "0.3"),
        ],
    );
    assert!(
        b.contains("err timed out"),
        "the same GPU under another index: {b}"
    );
    assert!(t.elapsed() < Duration::from_secs(10));
    // A view where GPU 3 comes first takes the next one it prefers.
    let c = s.run(
        "C",
        &[
            ("CUDA_VISIBLE_DEVICES", "3,2"),
            ("GPUMUTEX_VISIBLE_DEVICES", "all"),
        ],
    );
    assert!(
        c.contains(&format!("keys={}", uuid(2)))
            && c.contains("devs=[1]")
            && c.contains("CUDA_VISIBLE_DEVICES=2 "),
        "{c}"
    );
    // Any view sees GPU 3 busy, under its own number.
    let spec = VisibleSpec::Names(vec![gpukit_mutex::DeviceName::Index(3)]);
    let st = gpukit_mutex::status_with(
        &s.locks,
        Some(&spec),
        &DeviceSource::ProcDir(s.root.join("gpus")),
    )
    .expect("status");
    let d3 = st.devices.iter().find(|d| d.index == Some(3)).expect("3");
    assert!(d3.busy && d3.device == uuid(3), "{st}");
    assert!(
        st.to_string().contains(&format!("device 3 ({})", uuid(3))),
        "{st}"
    );
    fs::write(&release, b"").expect("release");
    kids.0[0].wait().expect("A");
    let b = s.run(
        "B2",
        &[
            ("CUDA_VISIBLE_DEVICES", "3"),
            ("GPUMUTEX_VISIBLE_DEVICES", "0"),
        ],
    );
    assert!(b.contains(&format!("keys={}", uuid(3))), "{b}");
}

/// Inside an allocation (Slurm's `CUDA_VISIBLE_DEVICES=2,3`) only its GPUs can be granted; the
/// command gets them in its own numbering. `NVIDIA_VISIBLE_DEVICES` (a container's or the
/// Kubernetes device plugin's UUIDs) bounds the grant the same way.
#[test]
fn grants_stay_inside_the_inherited_allocation() {
    let s = setup(&["NVIDIA H200"; 4]);
    let e = s.run(
        "outside",
        &[
            ("CUDA_VISIBLE_DEVICES", "2,3"),
            ("GPUMUTEX_VISIBLE_DEVICES", "0,1,2"),
        ],
    );
    assert!(
        e.contains(" err ")
            && e.contains("device 2 is not visible")
            && e.contains("CUDA_VISIBLE_DEVICES=2,3"),
        "{e}"
    );
    let by_uuid = s.run(
        "uuid-outside",
        &[
            ("CUDA_VISIBLE_DEVICES", "2,3"),
            ("GPUMUTEX_VISIBLE_DEVICES", &uuid(0)),
        ],
    );
    assert!(
        by_uuid.contains(" err ") && by_uuid.contains("not one of this process's devices"),
        "{by_uuid}"
    );
    let ok = s.run(
        "pair",
        &[
            ("CUDA_VISIBLE_DEVICES", "2,3"),
            ("GPUMUTEX_VISIBLE_DEVICES", "all"),
            ("GPUMUTEX_NUM_DEVICES", "2"),
        ],
    );
    assert!(
        ok.contains("devs=[0, 1]")
            && ok.contains("CUDA_VISIBLE_DEVICES=2,3 ")
            && ok.contains("GPUMUTEX_VISIBLE_DEVICES=0,1 ")
            && ok.contains("GPUMUTEX_NUM_DEVICES=2"),
        "{ok}"
    );
    // A container given GPUs 3 and 1 by UUID: CUDA numbers them 0 and 1 in bus order.
    let nvd = format!("{},{}", uuid(3), uuid(1));
    let k = s.run(
        "k8s",
        &[
            ("NVIDIA_VISIBLE_DEVICES", &nvd),
            ("GPUMUTEX_VISIBLE_DEVICES", "1"),
        ],
    );
    assert!(
        k.contains(&format!("keys={}", uuid(3))) && k.contains("CUDA_VISIBLE_DEVICES=1 "),
        "{k}"
    );
    // An inherited list of UUIDs (prefixes work as in CUDA): the command is given UUIDs.
    let cvd = format!("{},{}", &uuid(1)[..13], &uuid(0)[..13]);
    let u = s.run(
        "uuids",
        &[
            ("CUDA_VISIBLE_DEVICES", &cvd),
            ("GPUMUTEX_VISIBLE_DEVICES", "1"),
        ],
    );
    assert!(
        u.contains(&format!("keys={}", uuid(0)))
            && u.contains(&format!("CUDA_VISIBLE_DEVICES={} ", uuid(0))),
        "{u}"
    );
}

/// Mixed models: CUDA's default order (fastest first) cannot be known without CUDA, so device
/// numbers are refused with the two ways out; `CUDA_DEVICE_ORDER=PCI_BUS_ID` and UUIDs work.
#[test]
fn device_order_is_honoured_or_the_ambiguity_reported() {
    let s = setup(&["NVIDIA H200", "NVIDIA A100-SXM4-80GB", "NVIDIA H200"]);
    let e = s.run("fastest", &[("GPUMUTEX_VISIBLE_DEVICES", "1")]);
    assert!(
        e.contains(" err ") && e.contains("CUDA_DEVICE_ORDER=PCI_BUS_ID") && e.contains("UUID"),
        "{e}"
    );
    let p = s.run(
        "pci",
        &[
            ("GPUMUTEX_VISIBLE_DEVICES", "1"),
            ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
        ],
    );
    assert!(
        p.contains(&format!("keys={}", uuid(1))) && p.contains("CUDA_VISIBLE_DEVICES=1 "),
        "{p}"
    );
    // By UUID under the default order: the command is given the UUID, not a number.
    let u = s.run("byuuid", &[("GPUMUTEX_VISIBLE_DEVICES", &uuid(2))]);
    assert!(
        u.contains(&format!("CUDA_VISIBLE_DEVICES={} ", uuid(2))),
        "{u}"
    );
}

/// Devices from a fake `nvidia-smi` on `PATH` (no `/proc` tree): GPUs by index and UUID, MIG
/// instances from `nvidia-smi -L`; a GPU in MIG mode cannot be taken whole; a MIG instance
/// named by an inherited `CUDA_VISIBLE_DEVICES` is locked and passed on by its UUID.
#[test]
fn nvidia_smi_on_path_and_mig_instances() {
    let s = setup(&["unused"]);
    let bin = s.root.join("bin");
    fs::create_dir(&bin).expect("mkdir");
    let mig0 = "MIG-aaaaaaaa-bbbb-cccc-dddd-000000000001";
    let mig1 = "MIG-bbbbbbbb-bbbb-cccc-dddd-000000000002";
    let script = format!(
        "#!/bin/sh\ncase \"$1\" in\n\
         --query-gpu=index,uuid,pci.bus_id,name) printf '0, {u0}, 00000000:18:00.0, NVIDIA H200\\n1, {u1}, 00000000:28:00.0, NVIDIA H200\\n' ;;\n\
         -L) printf 'GPU 0: NVIDIA H200 (UUID: {u0})\\nGPU 1: NVIDIA H200 (UUID: {u1})\\n  MIG 3g.71gb     Device  0: (UUID: {mig0})\\n  MIG 3g.71gb     Device  1: (UUID: {mig1})\\n' ;;\n\
         *) exit 2 ;;\nesac\n",
        u0 = uuid(0),
        u1 = uuid(1),
    );
    let smi = bin.join("nvidia-smi");
    fs::write(&smi, script).expect("script");
    fs::set_permissions(&smi, fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let vars = |extra: &[(&'static str, String)]| -> Vec<(String, String)> {
        let mut v = vec![
            ("PATH".to_string(), path.clone()),
            (
                "GPUMUTEX_DEVICE_SOURCE".to_string(),
                "nvidia-smi".to_string(),
            ),
        ];
        v.extend(extra.iter().map(|(k, x)| (k.to_string(), x.clone())));
        v
    };
    let run = |tag: &str, extra: &[(&'static str, String)]| -> String {
        let v = vars(extra);
        let refs: Vec<(&str, &str)> = v.iter().map(|(k, x)| (k.as_str(), x.as_str())).collect();
        s.run(tag, &refs)
    };
    let g0 = run("gpu0", &[("GPUMUTEX_VISIBLE_DEVICES", "0".into())]);
    assert!(g0.contains(&format!("keys={}", uuid(0))), "{g0}");
    let g1 = run("gpu1", &[("GPUMUTEX_VISIBLE_DEVICES", "1".into())]);
    assert!(
        g1.contains(" err ") && g1.contains("MIG mode") && g1.contains(mig0),
        "{g1}"
    );
    let m = run(
        "mig",
        &[
            ("CUDA_VISIBLE_DEVICES", format!("{},{}", &mig1[..12], mig0)),
            ("GPUMUTEX_VISIBLE_DEVICES", "0".into()),
        ],
    );
    assert!(
        m.contains(&format!("keys={mig1}")) && m.contains(&format!("CUDA_VISIBLE_DEVICES={mig1} ")),
        "{m}"
    );
    // Auto uses nvidia-smi from PATH when the driver's /proc directory is absent.
    if !Path::new("/proc/driver/nvidia/gpus").exists() {
        let a = run(
            "auto",
            &[
                ("GPUMUTEX_DEVICE_SOURCE", "auto".into()),
                ("GPUMUTEX_VISIBLE_DEVICES", "0".into()),
            ],
        );
        assert!(a.contains(&format!("keys={}", uuid(0))), "{a}");
    }
    // No device information at all: numbers are physical indices (the documented fallback).
    let n = run(
        "none",
        &[
            ("GPUMUTEX_DEVICE_SOURCE", "none".into()),
            ("CUDA_VISIBLE_DEVICES", "5,6".into()),
            ("GPUMUTEX_VISIBLE_DEVICES", "1".into()),
        ],
    );
    assert!(
        n.contains("keys=6 ") && n.contains("CUDA_VISIBLE_DEVICES=6 "),
        "{n}"
    );
}

/// On a GPU host: the driver's `/proc` tree and `nvidia-smi` name the same GPUs in the same
/// order, and a mutex built with the default source (auto) locks them by those UUIDs. Skips
/// without a driver (fails instead with `GPUKIT_REQUIRE_GPU=1`).
#[test]
fn the_real_driver_and_nvidia_smi_agree() {
    use gpukit_mutex::devices::discover;
    let proc_dir = Path::new(gpukit_mutex::devices::DEFAULT_PROC_DIR);
    let from_proc = discover(&DeviceSource::ProcDir(proc_dir.into())).expect("read /proc");
    let Some(from_proc) = from_proc else {
        assert!(
            std::env::var("GPUKIT_REQUIRE_GPU").as_deref() != Ok("1"),
            "GPUKIT_REQUIRE_GPU=1 but {} lists no GPU",
            proc_dir.display()
        );
        eprintln!(
            "SKIPPED the_real_driver_and_nvidia_smi_agree: no NVIDIA driver here ({} lists no GPU)",
            proc_dir.display()
        );
        return;
    };
    let uuids = |d: &gpukit_mutex::devices::Discovered| -> Vec<String> {
        d.devices.iter().map(|g| g.uuid.clone()).collect()
    };
    eprintln!("driver: {:?}", from_proc.devices);
    match discover(&DeviceSource::NvidiaSmi("nvidia-smi".into())).expect("nvidia-smi") {
        Some(smi) => assert_eq!(uuids(&from_proc), uuids(&smi), "{smi:?}"),
        None => eprintln!("(no nvidia-smi on PATH: only the driver's list is checked)"),
    }
    let t = tempfile::tempdir().expect("tempdir");
    let m = GpuMutex::builder()
        .ignore_env()
        .visible_device_list("all")
        .expect("all")
        .lock_dir(t.path())
        .build()
        .expect("build");
    let g = m.lock().expect("lock");
    let got = g.granted()[0].uuid.clone().unwrap_or_default();
    assert!(
        uuids(&from_proc).contains(&got),
        "{got} is one of the driver's GPUs"
    );
    eprintln!(
        "granted {:?}, CUDA_VISIBLE_DEVICES={}",
        g.granted(),
        g.cuda_visible_devices()
    );
}
