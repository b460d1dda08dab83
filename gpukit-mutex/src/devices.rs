//! Devices: what a device name means in this process, and what is locked.
//!
//! A device is locked under its **physical identity**, its UUID (`GPU-…`, or `MIG-…` for a MIG
//! instance), found without CUDA: from the driver's `/proc/driver/nvidia/gpus/*/information`,
//! else from `nvidia-smi --query-gpu=index,uuid,pci.bus_id,name --format=csv,noheader` (and
//! `nvidia-smi -L` for MIG instances). Two processes that number the same GPU differently
//! (different inherited `CUDA_VISIBLE_DEVICES`) therefore lock the same thing.
//!
//! **Names are read the way CUDA in this process would read them.** The devices CUDA would
//! enumerate here (the *process view*) are worked out in three steps:
//!
//! 1. the driver's devices in CUDA's order: `CUDA_DEVICE_ORDER=PCI_BUS_ID` is PCI bus order
//!    (the driver's and `nvidia-smi`'s order); the default, `FASTEST_FIRST`, puts faster GPUs
//!    first, which cannot be known without CUDA: it is taken to be PCI bus order when all GPUs
//!    are of one model (ties are broken by bus id), and numeric names are refused on a machine
//!    with mixed models ([`crate::Error::AmbiguousDeviceOrder`]; name devices by UUID there, or
//!    set `CUDA_DEVICE_ORDER=PCI_BUS_ID`);
//! 2. restricted to `NVIDIA_VISIBLE_DEVICES` (set by container runtimes and the Kubernetes
//!    device plugin): UUIDs (`GPU-…`, `MIG-…`) select those devices; numbers are host indices
//!    and are applied only when the driver lists more GPUs than the variable names (inside a
//!    container the driver already lists only the container's GPUs); `all`, `void` or unset
//!    change nothing, `none` leaves no device;
//! 3. selected and reordered by an inherited `CUDA_VISIBLE_DEVICES` (Slurm's GRES allocation,
//!    a parent launcher), as CUDA does: indices into the list of step 2 or unique UUID
//!    prefixes, up to the first entry that names no device.
//!
//! `GPUMUTEX_VISIBLE_DEVICES` (and the builder) then name devices *of the process view*: `0` is
//! the device this process's CUDA calls 0, a UUID must be one of them, and `all` is all of
//! them. So inside a Slurm job whose allocation is GPUs 2 and 3 (`CUDA_VISIBLE_DEVICES=2,3`),
//! `GPUMUTEX_VISIBLE_DEVICES=0,1` or `all` means physical GPUs 2 and 3, and nothing outside
//! the allocation can be granted. A program started with granted devices gets them in its
//! `CUDA_VISIBLE_DEVICES` in *its* namespace, which CUDA applies to the list of step 2: as
//! indices into that list, or as UUIDs when the inherited variable used UUIDs, when indices
//! would be ambiguous, or for MIG instances.
//!
//! **MIG.** A MIG instance is part of the process view when `NVIDIA_VISIBLE_DEVICES` or an
//! inherited `CUDA_VISIBLE_DEVICES` names it (that is how CUDA programs are given MIG
//! instances). Where `nvidia-smi -L` shows a GPU's MIG instances, the GPU itself cannot be
//! requested as a whole ([`crate::Error::InvalidDeviceList`] names its instances). Without
//! `nvidia-smi`, MIG mode cannot be seen: do not name one GPU both as a whole and through its
//! instances in one lock directory.
//!
//! **Without the driver's information** (no `/proc/driver/nvidia`, no `nvidia-smi`:
//! [`DeviceSource::None`], or a machine without the driver), numbers are taken to be physical
//! indices, as before gpukit-mutex knew UUIDs: an inherited `CUDA_VISIBLE_DEVICES` of numbers
//! still selects and renumbers them, UUIDs in it are locked as written. Every participant of a
//! lock directory must then do without (a process that knows UUIDs and one that does not lock
//! the same GPU under different names).
//!
//! The source is chosen with `GPUMUTEX_DEVICE_SOURCE` or [`crate::GpuMutexBuilder::device_source`]
//! ([`DeviceSource`]); tests point it at a fake `/proc` tree or a fake `nvidia-smi`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::MAX_DEVICE_INDEX;
use crate::error::{Error, Result};

/// gpukit extension: where device identities come from (see [`DeviceSource::parse`]).
pub const ENV_DEVICE_SOURCE: &str = "GPUMUTEX_DEVICE_SOURCE";
/// The driver's per-GPU directory.
pub const DEFAULT_PROC_DIR: &str = "/proc/driver/nvidia/gpus";
/// How long `nvidia-smi` may take.
const SMI_TIMEOUT: Duration = Duration::from_secs(20);
/// Most bytes read from `nvidia-smi` or an `information` file.
const READ_LIMIT: u64 = 1 << 20;

/// Where the physical devices are found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum DeviceSource {
    /// `/proc/driver/nvidia/gpus` if it lists GPUs, else `nvidia-smi` from `PATH`, else none.
    #[default]
    Auto,
    /// No discovery: numbers are physical indices (see the module docs).
    None,
    /// A directory laid out like `/proc/driver/nvidia/gpus` (one directory per GPU, named by
    /// its PCI bus id, holding an `information` file).
    ProcDir(PathBuf),
    /// This `nvidia-smi` program.
    NvidiaSmi(PathBuf),
}

impl DeviceSource {
    /// Parses `GPUMUTEX_DEVICE_SOURCE`: `auto`, `none`, `proc:<dir>`, `nvidia-smi` (from `PATH`)
    /// or `nvidia-smi:<program>`.
    pub fn parse(value: &str) -> Result<DeviceSource> {
        let v = value.trim();
        let bad = |reason: &str| Error::InvalidConfig {
            name: ENV_DEVICE_SOURCE,
            value: value.to_string(),
            reason: reason.to_string(),
        };
        match v {
            "" | "auto" => Ok(DeviceSource::Auto),
            "none" => Ok(DeviceSource::None),
            "nvidia-smi" => Ok(DeviceSource::NvidiaSmi(PathBuf::from("nvidia-smi"))),
            _ => {
                if let Some(d) = v.strip_prefix("proc:").filter(|d| !d.is_empty()) {
                    Ok(DeviceSource::ProcDir(PathBuf::from(d)))
                } else if let Some(p) = v.strip_prefix("nvidia-smi:").filter(|p| !p.is_empty()) {
                    Ok(DeviceSource::NvidiaSmi(PathBuf::from(p)))
                } else {
                    Err(bad(
                        "expected auto, none, proc:<dir>, nvidia-smi or nvidia-smi:<program>",
                    ))
                }
            }
        }
    }
}

/// One GPU as the driver describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhysicalDevice {
    /// Its index in PCI bus order (the driver's and `nvidia-smi`'s numbering).
    pub index: u32,
    /// `GPU-…`.
    pub uuid: String,
    /// PCI bus id, e.g. `0000:18:00.0`.
    pub bus_id: String,
    /// Model name, e.g. `NVIDIA H200`.
    pub model: String,
    /// UUIDs of its MIG instances (known from `nvidia-smi -L` only).
    pub mig: Vec<String>,
}

/// The devices found, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    /// In PCI bus order.
    pub devices: Vec<PhysicalDevice>,
    /// Where they were found, for messages.
    pub from: String,
}

fn discovery_err(from: &str, reason: impl Into<String>) -> Error {
    Error::DeviceDiscovery {
        source_name: from.to_string(),
        reason: reason.into(),
    }
}

/// A UUID as the driver writes it: `GPU-`/`MIG-` and hex digits with dashes (legacy MIG names
/// `MIG-GPU-<uuid>/<gi>/<ci>` also have slashes).
pub(crate) fn is_uuid_name(s: &str) -> bool {
    (s.starts_with("GPU-") || s.starts_with("MIG-"))
        && s.len() <= 96
        && s[4..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'/')
}

fn read_limited(path: &Path) -> std::io::Result<String> {
    let mut s = String::new();
    std::fs::File::open(path)?
        .take(READ_LIMIT)
        .read_to_string(&mut s)?;
    Ok(s)
}

/// Reads a directory laid out like `/proc/driver/nvidia/gpus`; `Ok(None)` if it does not
/// exist or lists no GPU.
fn from_proc(dir: &Path) -> Result<Option<Discovered>> {
    let from = dir.display().to_string();
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(discovery_err(&from, e.to_string())),
    };
    let mut found: Vec<(String, String, String)> = Vec::new();
    for e in rd.flatten() {
        let info = e.path().join("information");
        let text = match read_limited(&info) {
            Ok(t) => t,
            Err(_) => continue,
        };
        let field = |key: &str| {
            text.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == key).then(|| v.trim().to_string())
            })
        };
        let uuid = field("GPU UUID")
            .filter(|u| u.starts_with("GPU-") && is_uuid_name(u))
            .ok_or_else(|| {
                discovery_err(
                    &from,
                    format!("{}: no valid \"GPU UUID\" line", info.display()),
                )
            })?;
        let bus = field("Bus Location")
            .unwrap_or_else(|| e.file_name().to_string_lossy().into_owned())
            .to_ascii_lowercase();
        found.push((bus, uuid, field("Model").unwrap_or_default()));
    }
    if found.is_empty() {
        return Ok(None);
    }
    found.sort();
    Ok(Some(Discovered {
        devices: found
            .into_iter()
            .enumerate()
            .map(|(i, (bus_id, uuid, model))| PhysicalDevice {
                index: i as u32,
                uuid,
                bus_id,
                model,
                mig: Vec::new(),
            })
            .collect(),
        from,
    }))
}

/// Runs `program args` with a time limit and returns its standard output.
fn run_limited(program: &Path, args: &[&str]) -> std::io::Result<String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut out = child.stdout.take().map(|o| o.take(READ_LIMIT));
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_string(&mut s);
        }
        s
    });
    let started = Instant::now();
    loop {
        match child.try_wait()? {
            Some(st) => {
                let text = reader.join().unwrap_or_default();
                if !st.success() {
                    return Err(std::io::Error::other(format!("exited with {st}")));
                }
                return Ok(text);
            }
            None if started.elapsed() > SMI_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(std::io::Error::other(format!(
                    "no answer within {SMI_TIMEOUT:?}"
                )));
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Asks `nvidia-smi`; `Ok(None)` if the program cannot be started.
fn from_smi(program: &Path) -> Result<Option<Discovered>> {
    let from = program.display().to_string();
    let text = match run_limited(
        program,
        &[
            "--query-gpu=index,uuid,pci.bus_id,name",
            "--format=csv,noheader",
        ],
    ) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(discovery_err(&from, e.to_string())),
    };
    let mut devices = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.splitn(4, ',').map(str::trim).collect();
        let (Some(index), Some(uuid)) = (f.first().and_then(|i| i.parse::<u32>().ok()), f.get(1))
        else {
            return Err(discovery_err(&from, format!("unexpected line {line:?}")));
        };
        if !uuid.starts_with("GPU-") || !is_uuid_name(uuid) {
            return Err(discovery_err(&from, format!("unexpected UUID in {line:?}")));
        }
        devices.push(PhysicalDevice {
            index,
            uuid: uuid.to_string(),
            bus_id: f.get(2).unwrap_or(&"").to_ascii_lowercase(),
            model: f.get(3).unwrap_or(&"").to_string(),
            mig: Vec::new(),
        });
    }
    if devices.is_empty() {
        return Ok(None);
    }
    devices.sort_by_key(|d| d.index);
    if devices.iter().enumerate().any(|(i, d)| d.index != i as u32) {
        return Err(discovery_err(&from, "GPU indices are not 0, 1, 2, ..."));
    }
    // MIG instances, under their GPU (`nvidia-smi -L`); optional.
    if let Ok(list) = run_limited(program, &["-L"]) {
        let mut current: Option<usize> = None;
        for line in list.lines() {
            let uuid = line
                .split("(UUID: ")
                .nth(1)
                .and_then(|r| r.split(')').next())
                .map(str::trim);
            let t = line.trim_start();
            if t.starts_with("GPU ") {
                current = uuid.and_then(|u| devices.iter().position(|d| d.uuid == u));
            } else if t.starts_with("MIG ") {
                if let (Some(i), Some(u)) = (current, uuid) {
                    if u.starts_with("MIG-") && is_uuid_name(u) {
                        devices[i].mig.push(u.to_string());
                    }
                }
            }
        }
    }
    Ok(Some(Discovered { devices, from }))
}

/// Finds the physical devices (`Ok(None)`: none found, or [`DeviceSource::None`]).
pub fn discover(source: &DeviceSource) -> Result<Option<Discovered>> {
    match source {
        DeviceSource::None => Ok(None),
        DeviceSource::ProcDir(d) => from_proc(d),
        DeviceSource::NvidiaSmi(p) => from_smi(p),
        DeviceSource::Auto => match from_proc(Path::new(DEFAULT_PROC_DIR))? {
            Some(d) => Ok(Some(d)),
            None => from_smi(Path::new("nvidia-smi")),
        },
    }
}

/// A device name as a user or a variable writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceName {
    /// A number: an index in some numbering.
    Index(u32),
    /// A UUID or a unique prefix of one (`GPU-…`, `MIG-…`).
    Uuid(String),
}

impl std::fmt::Display for DeviceName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceName::Index(i) => write!(f, "{i}"),
            DeviceName::Uuid(u) => f.write_str(u),
        }
    }
}

/// What `GPUMUTEX_VISIBLE_DEVICES` (or the builder) asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VisibleSpec {
    /// Every device of the process view (`all`).
    All,
    /// These devices, in preference order.
    Names(Vec<DeviceName>),
}

/// Parses a device list such as `0,2,3`, `GPU-8f2c…,GPU-11aa…` (UUIDs or unique prefixes), a
/// mix, or `all`. Rejects empty lists and items, negative or out-of-range numbers, anything
/// else, and duplicates.
pub fn parse_visible(input: &str) -> Result<VisibleSpec> {
    if input.trim() == "all" {
        return Ok(VisibleSpec::All);
    }
    let err = |reason: String| Error::InvalidDeviceList {
        input: input.to_string(),
        reason,
    };
    if input.trim().is_empty() {
        return Err(err("the list is empty".into()));
    }
    let mut out: Vec<DeviceName> = Vec::new();
    for (i, item) in input.split(',').enumerate() {
        let item = item.trim();
        if item.is_empty() {
            return Err(err(format!("item {} is empty", i + 1)));
        }
        let name = if item.bytes().all(|b| b.is_ascii_digit()) {
            let dev: u32 = item
                .parse()
                .ok()
                .filter(|d| *d <= MAX_DEVICE_INDEX)
                .ok_or_else(|| {
                    err(format!(
                        "device {item} is out of range (max {MAX_DEVICE_INDEX})"
                    ))
                })?;
            DeviceName::Index(dev)
        } else if is_uuid_name(item) && item.len() > 4 {
            DeviceName::Uuid(item.to_string())
        } else {
            return Err(err(format!(
                "item {item:?} is neither a device index (0, 1, ...) nor a GPU-/MIG- UUID"
            )));
        };
        if out.contains(&name) {
            return Err(err(format!("device {name} is listed twice")));
        }
        out.push(name);
    }
    Ok(VisibleSpec::Names(out))
}

/// A device this process can name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// Its number in this process's CUDA numbering (the process view).
    pub index: u32,
    /// What is locked: its UUID, or without discovery its physical index (see the module docs).
    pub key: String,
    /// Its UUID, when known.
    pub uuid: Option<String>,
    /// Its index in the list a child's `CUDA_VISIBLE_DEVICES` is applied to (step 2 of the
    /// module docs), when it has one there and it is unambiguous.
    pub base_index: Option<u32>,
}

/// One entry of the list CUDA applies `CUDA_VISIBLE_DEVICES` to (step 2).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Base {
    key: String,
    uuid: Option<String>,
    index: Option<u32>,
}

/// How this process's CUDA would number devices (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace {
    /// The process view; `None`: numbers are physical indices (no discovery, no inherited
    /// `CUDA_VISIBLE_DEVICES`).
    view: Option<Vec<Device>>,
    /// Whether a child's `CUDA_VISIBLE_DEVICES` should name devices by UUID.
    child_uuids: bool,
    /// Why numbers cannot be resolved (mixed models under `FASTEST_FIRST`), if they cannot.
    ambiguous: Option<String>,
    /// GPUs in MIG mode (known from `nvidia-smi -L`): UUID -> its instances.
    mig_parents: Vec<(String, Vec<String>)>,
    /// Whether an inherited `CUDA_VISIBLE_DEVICES` made the process view.
    from_cvd: bool,
    /// Where the devices came from, and the variables applied, for messages.
    context: String,
}

/// The variables a namespace is built from.
pub(crate) const ENV_CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";
pub(crate) const ENV_NVIDIA_VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";
pub(crate) const ENV_CUDA_DEVICE_ORDER: &str = "CUDA_DEVICE_ORDER";

fn prefix_match<'a>(
    items: impl Iterator<Item = &'a str>,
    name: &str,
) -> std::result::Result<Option<&'a str>, ()> {
    let mut hit = None;
    for u in items {
        if u == name {
            return Ok(Some(u));
        }
        if u.starts_with(name) {
            if hit.is_some() {
                return Err(());
            }
            hit = Some(u);
        }
    }
    Ok(hit)
}

impl Namespace {
    /// The namespace of a process whose environment is `env`, with devices from `found`.
    pub fn new(found: Option<&Discovered>, env: &dyn Fn(&str) -> Option<String>) -> Result<Self> {
        let order = env(ENV_CUDA_DEVICE_ORDER);
        let pci_order = match order.as_deref().map(str::trim) {
            None | Some("") | Some("FASTEST_FIRST") => false,
            Some("PCI_BUS_ID") => true,
            Some(other) => {
                return Err(Error::InvalidConfig {
                    name: ENV_CUDA_DEVICE_ORDER,
                    value: other.to_string(),
                    reason: "expected FASTEST_FIRST or PCI_BUS_ID".into(),
                })
            }
        };
        let nvd = env(ENV_NVIDIA_VISIBLE_DEVICES);
        let cvd = env(ENV_CUDA_VISIBLE_DEVICES);
        let mut context = match found {
            Some(f) => format!("devices from {}", f.from),
            None => "no device information (numbers are physical indices)".to_string(),
        };
        for (k, v) in [
            (ENV_NVIDIA_VISIBLE_DEVICES, &nvd),
            (ENV_CUDA_VISIBLE_DEVICES, &cvd),
        ] {
            if let Some(v) = v {
                context.push_str(&format!(", {k}={v}"));
            }
        }
        let mut ambiguous = None;
        let mut mig_parents = Vec::new();
        // Step 1 and 2: the list CUDA_VISIBLE_DEVICES is applied to; `None` = identity.
        let base: Option<Vec<Base>> = match found {
            Some(f) => {
                let models: std::collections::BTreeSet<&str> =
                    f.devices.iter().map(|d| d.model.as_str()).collect();
                if !pci_order && models.len() > 1 {
                    ambiguous = Some(format!(
                        "this machine has GPUs of different models ({}) and CUDA_DEVICE_ORDER is \
                         FASTEST_FIRST (the default), an order that cannot be known without CUDA",
                        models.into_iter().collect::<Vec<_>>().join(", ")
                    ));
                }
                for d in &f.devices {
                    if !d.mig.is_empty() {
                        mig_parents.push((d.uuid.clone(), d.mig.clone()));
                    }
                }
                let all: Vec<Base> = f
                    .devices
                    .iter()
                    .map(|d| Base {
                        key: d.uuid.clone(),
                        uuid: Some(d.uuid.clone()),
                        index: Some(d.index),
                    })
                    .collect();
                Some(apply_nvd(all, f, nvd.as_deref(), &context)?)
            }
            None => match nvd.as_deref().map(str::trim) {
                Some("none") => Some(Vec::new()),
                _ => None,
            },
        };
        let base = base.map(|b| {
            b.into_iter()
                .enumerate()
                .map(|(i, mut e)| {
                    e.index = e.index.map(|_| i as u32);
                    e
                })
                .collect::<Vec<Base>>()
        });
        let mut child_uuids = ambiguous.is_some();
        // Step 3: an inherited CUDA_VISIBLE_DEVICES.
        let view: Option<Vec<Base>> = match cvd.as_deref() {
            None => base.clone(),
            Some(list) => {
                let mut out: Vec<Base> = Vec::new();
                for item in list.split(',').map(str::trim) {
                    let entry = if let Ok(i) = item.parse::<i64>() {
                        if i < 0 {
                            break;
                        }
                        let Ok(i) = u32::try_from(i) else { break };
                        match &base {
                            Some(b) => {
                                if let Some(why) = &ambiguous {
                                    return Err(Error::AmbiguousDeviceOrder {
                                        names: format!("{ENV_CUDA_VISIBLE_DEVICES}={list}"),
                                        reason: why.clone(),
                                    });
                                }
                                match b.get(i as usize) {
                                    Some(e) => e.clone(),
                                    None => break,
                                }
                            }
                            None if i <= MAX_DEVICE_INDEX => Base {
                                key: i.to_string(),
                                uuid: None,
                                index: Some(i),
                            },
                            None => break,
                        }
                    } else if is_uuid_name(item) && item.len() > 4 {
                        child_uuids = true;
                        match (&base, found) {
                            (Some(b), Some(f)) => match resolve_uuid(b, f, item) {
                                Ok(Some(e)) => e,
                                Ok(None) => break,
                                Err(()) => {
                                    return Err(Error::InvalidDeviceList {
                                        input: list.to_string(),
                                        reason: format!(
                                            "{ENV_CUDA_VISIBLE_DEVICES}: {item} matches several \
                                             devices"
                                        ),
                                    })
                                }
                            },
                            _ => Base {
                                key: item.to_string(),
                                uuid: Some(item.to_string()),
                                index: None,
                            },
                        }
                    } else {
                        break;
                    };
                    if out.iter().any(|o| o.key == entry.key) {
                        break;
                    }
                    out.push(entry);
                }
                Some(out)
            }
        };
        let view = view.map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, b)| Device {
                    index: i as u32,
                    key: b.key,
                    uuid: b.uuid,
                    base_index: if ambiguous.is_some() { None } else { b.index },
                })
                .collect()
        });
        Ok(Namespace {
            view,
            child_uuids,
            ambiguous,
            mig_parents,
            from_cvd: cvd.is_some(),
            context,
        })
    }

    /// The devices `spec` names, in its order.
    pub fn resolve(&self, spec: &VisibleSpec) -> Result<Vec<Device>> {
        let text = match spec {
            VisibleSpec::All => "all".to_string(),
            VisibleSpec::Names(n) => n
                .iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(","),
        };
        let not_visible = |what: String| Error::DeviceNotVisible {
            names: text.clone(),
            reason: what,
            context: self.context.clone(),
        };
        let out: Vec<Device> = match (spec, &self.view) {
            (VisibleSpec::All, Some(v)) => v.clone(),
            (VisibleSpec::All, None) => {
                return Err(not_visible(
                    "\"all\" needs to know the devices: there is no device information and no \
                     CUDA_VISIBLE_DEVICES"
                        .into(),
                ))
            }
            (VisibleSpec::Names(names), view) => {
                let mut out = Vec::new();
                for n in names {
                    let d = match (n, view) {
                        (DeviceName::Index(i), Some(v)) => {
                            if let (Some(why), false) = (&self.ambiguous, self.from_cvd) {
                                return Err(Error::AmbiguousDeviceOrder {
                                    names: text.clone(),
                                    reason: why.clone(),
                                });
                            }
                            v.get(*i as usize).cloned().ok_or_else(|| {
                                not_visible(format!(
                                    "device {i} is not visible: this process sees {} device(s)",
                                    v.len()
                                ))
                            })?
                        }
                        (DeviceName::Index(i), None) => Device {
                            index: *i,
                            key: i.to_string(),
                            uuid: None,
                            base_index: Some(*i),
                        },
                        (DeviceName::Uuid(u), Some(v)) => {
                            match prefix_match(v.iter().filter_map(|d| d.uuid.as_deref()), u) {
                                Ok(Some(full)) => v
                                    .iter()
                                    .find(|d| d.uuid.as_deref() == Some(full))
                                    .cloned()
                                    .ok_or_else(|| not_visible(format!("{u} is not visible")))?,
                                Ok(None) => {
                                    return Err(not_visible(format!(
                                        "{u} is not one of this process's devices"
                                    )))
                                }
                                Err(()) => {
                                    return Err(not_visible(format!("{u} matches several devices")))
                                }
                            }
                        }
                        (DeviceName::Uuid(u), None) => {
                            return Err(not_visible(format!(
                                "{u} cannot be checked: there is no device information and no \
                                 CUDA_VISIBLE_DEVICES"
                            )))
                        }
                    };
                    out.push(d);
                }
                out
            }
        };
        for d in &out {
            if let Some((_, inst)) = self
                .mig_parents
                .iter()
                .find(|(p, _)| d.uuid.as_deref() == Some(p.as_str()))
            {
                return Err(Error::InvalidDeviceList {
                    input: text.clone(),
                    reason: format!(
                        "{} is in MIG mode: name its MIG instances instead ({})",
                        d.key,
                        inst.join(", ")
                    ),
                });
            }
        }
        if out.is_empty() {
            return Err(not_visible("no device is visible".into()));
        }
        let mut keys: Vec<&str> = out.iter().map(|d| d.key.as_str()).collect();
        keys.sort_unstable();
        if keys.windows(2).any(|w| w[0] == w[1]) {
            return Err(Error::InvalidDeviceList {
                input: text,
                reason: "two names refer to the same device".into(),
            });
        }
        Ok(out)
    }

    /// The `CUDA_VISIBLE_DEVICES` value under which a program started from this process sees
    /// exactly `devices`, in this order (see the module docs).
    pub fn child_cuda_visible_devices(&self, devices: &[Device]) -> String {
        let by_index = !self.child_uuids && devices.iter().all(|d| d.base_index.is_some());
        devices
            .iter()
            .map(|d| match (by_index, d.base_index, &d.uuid) {
                (true, Some(i), _) => i.to_string(),
                (_, _, Some(u)) => u.clone(),
                (_, Some(i), None) => i.to_string(),
                (_, None, None) => d.key.clone(),
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The device of the process view with lock key `key`, if any.
    pub fn by_key(&self, key: &str) -> Option<Device> {
        match &self.view {
            Some(v) => v.iter().find(|d| d.key == key).cloned(),
            None => key
                .parse::<u32>()
                .ok()
                .filter(|i| *i <= MAX_DEVICE_INDEX)
                .map(|i| Device {
                    index: i,
                    key: key.to_string(),
                    uuid: None,
                    base_index: Some(i),
                }),
        }
    }
}

/// Step 2: restricts the driver's devices to `NVIDIA_VISIBLE_DEVICES`.
fn apply_nvd(
    all: Vec<Base>,
    f: &Discovered,
    nvd: Option<&str>,
    context: &str,
) -> Result<Vec<Base>> {
    let Some(v) = nvd.map(str::trim) else {
        return Ok(all);
    };
    match v {
        "" | "all" | "void" => return Ok(all),
        "none" => return Ok(Vec::new()),
        _ => {}
    }
    let items: Vec<&str> = v
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let numbers = items.iter().filter(|s| s.parse::<u32>().is_ok()).count();
    // Numbers are host indices; inside a container the driver lists only the container's GPUs
    // already, so they are applied only when it lists more than the variable names.
    let apply_numbers = numbers > 0 && all.len() > items.len();
    let mut out: Vec<Base> = Vec::new();
    for item in items {
        let hit: Option<Base> = if let Ok(i) = item.parse::<u32>() {
            if !apply_numbers {
                continue;
            }
            all.get(i as usize).cloned()
        } else if is_uuid_name(item) {
            resolve_uuid(&all, f, item).map_err(|()| Error::InvalidDeviceList {
                input: v.to_string(),
                reason: format!("{ENV_NVIDIA_VISIBLE_DEVICES}: {item} matches several devices"),
            })?
        } else {
            return Err(Error::InvalidDeviceList {
                input: v.to_string(),
                reason: format!("{ENV_NVIDIA_VISIBLE_DEVICES}: cannot read {item:?} ({context})"),
            });
        };
        if let Some(h) = hit {
            if !out.iter().any(|o| o.key == h.key) {
                out.push(h);
            }
        }
    }
    if numbers > 0 && !apply_numbers {
        return Ok(all);
    }
    // CUDA numbers what is left in its own order, not in the variable's.
    out.sort_by_key(|b| (b.index.is_none(), b.index));
    Ok(out)
}

/// The entry of `base` (or a MIG instance of a discovered GPU) that `name` (a UUID or unique
/// prefix) names; `Err` if it is ambiguous.
fn resolve_uuid(
    base: &[Base],
    f: &Discovered,
    name: &str,
) -> std::result::Result<Option<Base>, ()> {
    if name.starts_with("GPU-") {
        let hit = prefix_match(base.iter().filter_map(|b| b.uuid.as_deref()), name)?;
        return Ok(hit.and_then(|u| base.iter().find(|b| b.uuid.as_deref() == Some(u)).cloned()));
    }
    // MIG: an instance `nvidia-smi -L` listed (prefix), else a complete name as written.
    let known = f
        .devices
        .iter()
        .flat_map(|d| d.mig.iter().map(String::as_str));
    match prefix_match(known, name)? {
        Some(full) => Ok(Some(Base {
            key: full.to_string(),
            uuid: Some(full.to_string()),
            index: None,
        })),
        None if is_complete_mig(name) => Ok(Some(Base {
            key: name.to_string(),
            uuid: Some(name.to_string()),
            index: None,
        })),
        None => Ok(None),
    }
}

/// `MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, or the legacy `MIG-GPU-<uuid>/<gi>/<ci>`.
fn is_complete_mig(s: &str) -> bool {
    let Some(rest) = s.strip_prefix("MIG-") else {
        return false;
    };
    if let Some(legacy) = rest.strip_prefix("GPU-") {
        return legacy.split('/').count() == 3;
    }
    let groups: Vec<usize> = rest.split('-').map(str::len).collect();
    groups == [8, 4, 4, 4, 12] && rest.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(i: u32, model: &str) -> PhysicalDevice {
        PhysicalDevice {
            index: i,
            uuid: format!("GPU-{i:08x}-aaaa-bbbb-cccc-{i:012x}"),
            bus_id: format!("0000:{:02x}:00.0", 0x18 + i),
            model: model.into(),
            mig: Vec::new(),
        }
    }

    fn four() -> Discovered {
        Discovered {
            devices: (0..4).map(|i| gpu(i, "NVIDIA H200")).collect(),
            from: "test".into(),
        }
    }

    fn ns(found: Option<&Discovered>, vars: &[(&str, &str)]) -> Result<Namespace> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Namespace::new(found, &|k| {
            vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
    }

    fn keys(ds: &[Device]) -> Vec<String> {
        ds.iter().map(|d| d.key.clone()).collect()
    }

    fn names(s: &str) -> VisibleSpec {
        parse_visible(s).expect("parse")
    }

    #[test]
    fn slurm_allocation_renumbers_and_bounds_the_grant() {
        let f = four();
        let n = ns(Some(&f), &[("CUDA_VISIBLE_DEVICES", "2,3")]).expect("ns");
        let got = n.resolve(&names("0,1")).expect("resolve");
        assert_eq!(
            keys(&got),
            [f.devices[2].uuid.clone(), f.devices[3].uuid.clone()]
        );
        assert_eq!(n.resolve(&names("all")).expect("all"), got);
        assert!(matches!(
            n.resolve(&names("2")),
            Err(Error::DeviceNotVisible { .. })
        ));
        // A child gets the granted device in the numbering its CUDA applies the variable to.
        assert_eq!(n.child_cuda_visible_devices(&got[1..]), "3");
        // Two views of one GPU lock one key.
        let other = ns(Some(&f), &[("CUDA_VISIBLE_DEVICES", "3")]).expect("ns");
        assert_eq!(
            keys(&other.resolve(&names("0")).expect("r")),
            keys(&got[1..])
        );
    }

    #[test]
    fn uuids_prefixes_and_kubernetes_views() {
        let f = four();
        let u2 = f.devices[2].uuid.clone();
        let n = ns(Some(&f), &[("NVIDIA_VISIBLE_DEVICES", &u2)]).expect("ns");
        let got = n.resolve(&names("0")).expect("resolve");
        assert_eq!(keys(&got), std::slice::from_ref(&u2));
        assert_eq!(n.child_cuda_visible_devices(&got), "0");
        // An inherited CUDA_VISIBLE_DEVICES of UUIDs: the child is given UUIDs.
        let n = ns(Some(&f), &[("CUDA_VISIBLE_DEVICES", &u2[..12])]).expect("ns");
        let got = n.resolve(&names(&u2[..10])).expect("prefix");
        assert_eq!(n.child_cuda_visible_devices(&got), u2);
        // A prefix that matches several devices.
        let n = ns(Some(&f), &[]).expect("ns");
        assert!(n.resolve(&names("GPU-0000")).is_err());
        // NVIDIA_VISIBLE_DEVICES=none, and host numbers applied to a host view only.
        let n = ns(Some(&f), &[("NVIDIA_VISIBLE_DEVICES", "none")]).expect("ns");
        assert!(n.resolve(&names("0")).is_err());
        let n = ns(Some(&f), &[("NVIDIA_VISIBLE_DEVICES", "3,1")]).expect("ns");
        assert_eq!(
            keys(&n.resolve(&names("all")).expect("all")),
            [f.devices[1].uuid.clone(), f.devices[3].uuid.clone()]
        );
    }

    #[test]
    fn cuda_rules_for_inherited_lists() {
        let f = four();
        // Up to the first entry that names no device; duplicates end it too.
        for (cvd, want) in [
            ("1,7,2", 1),
            ("1,-1,2", 1),
            ("", 0),
            ("2,2,3", 1),
            ("x,1", 0),
        ] {
            let n = ns(Some(&f), &[("CUDA_VISIBLE_DEVICES", cvd)]).expect("ns");
            let all = n.resolve(&names("all"));
            match want {
                0 => assert!(all.is_err(), "{cvd}"),
                k => assert_eq!(all.expect("all").len(), k, "{cvd}"),
            }
        }
        assert!(ns(Some(&f), &[("CUDA_DEVICE_ORDER", "SLOWEST")]).is_err());
    }

    #[test]
    fn mixed_models_make_numbers_ambiguous_unless_pci_order() {
        let mut f = four();
        f.devices[3].model = "NVIDIA A100".into();
        let n = ns(Some(&f), &[]).expect("ns");
        assert!(matches!(
            n.resolve(&names("0")),
            Err(Error::AmbiguousDeviceOrder { .. })
        ));
        let u = f.devices[3].uuid.clone();
        let got = n.resolve(&names(&u)).expect("by uuid");
        assert_eq!(n.child_cuda_visible_devices(&got), u);
        let n = ns(Some(&f), &[("CUDA_DEVICE_ORDER", "PCI_BUS_ID")]).expect("ns");
        assert_eq!(keys(&n.resolve(&names("3")).expect("r")), [u]);
        assert!(matches!(
            ns(Some(&f), &[("CUDA_VISIBLE_DEVICES", "1")]),
            Err(Error::AmbiguousDeviceOrder { .. })
        ));
    }

    #[test]
    fn mig_instances() {
        let mut f = four();
        let m0 = "MIG-11111111-2222-3333-4444-555555555555".to_string();
        let m1 = "MIG-11111111-2222-3333-4444-666666666666".to_string();
        f.devices[0].mig = vec![m0.clone(), m1.clone()];
        let n = ns(
            Some(&f),
            &[("CUDA_VISIBLE_DEVICES", &format!("{m1},{}", &m0[..30]))],
        )
        .expect("ns");
        let got = n.resolve(&names("all")).expect("all");
        assert_eq!(keys(&got), [m1.clone(), m0.clone()]);
        assert_eq!(n.child_cuda_visible_devices(&got[..1]), m1);
        // The GPU in MIG mode cannot be taken whole.
        let n = ns(Some(&f), &[]).expect("ns");
        match n.resolve(&names("0")) {
            Err(Error::InvalidDeviceList { reason, .. }) => assert!(reason.contains("MIG mode")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn without_discovery_numbers_are_physical() {
        let n = ns(None, &[]).expect("ns");
        let got = n.resolve(&names("3,1")).expect("r");
        assert_eq!(keys(&got), ["3", "1"]);
        assert_eq!(n.child_cuda_visible_devices(&got), "3,1");
        assert!(n.resolve(&names("all")).is_err());
        let n = ns(None, &[("CUDA_VISIBLE_DEVICES", "2,3")]).expect("ns");
        let got = n.resolve(&names("1")).expect("r");
        assert_eq!(keys(&got), ["3"]);
        assert_eq!(n.child_cuda_visible_devices(&got), "3");
    }

    #[test]
    fn parses_lists_and_sources() {
        assert_eq!(parse_visible(" all ").expect("all"), VisibleSpec::All);
        for bad in ["", "0,,1", "-1", "1,1", "gpu-x", "GPU-", "0,all", "99999"] {
            assert!(parse_visible(bad).is_err(), "{bad}");
        }
        assert_eq!(
            DeviceSource::parse("proc:/x").expect("p"),
            DeviceSource::ProcDir("/x".into())
        );
        assert!(DeviceSource::parse("proc:").is_err());
        assert!(DeviceSource::parse("magic").is_err());
    }
}
