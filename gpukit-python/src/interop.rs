//! Sharing GPU memory with other Python libraries without copies, both ways: DLPack (the
//! current Python protocol: `__dlpack__(stream=, max_version=, dl_device=, copy=)`,
//! `__dlpack_device__`, `from_dlpack`; capsules and stream negotiation through the `dlpark`
//! crate) and the CUDA array interface, version 3 (`__cuda_array_interface__` with its `stream`
//! key).
//!
//! Ordering: an export makes the consumer's stream wait for every pending write and read of
//! the array on gpukit's streams (gpukit-core's `make_ready_on_raw`); an import asks the
//! producer to make its data ready on the calling thread's current gpukit stream (DLPack's
//! `stream=` argument), or makes that stream wait for the producer's stream (the interface's
//! `stream` key). Imported memory stays owned by its producer: gpukit keeps the producer's
//! capsule deleter or object alive as long as any view of the memory exists, and never frees
//! it.

use crate::array::Array;
use crate::errors::CoreResult;
use dlpark::ffi::{DLDataType, DLDataTypeCode, DLDevice, DLDeviceType};
use dlpark::python::{CudaStreamRequest, DlpackExporter, ExportRequest};
use dlpark::{DlpackFlags, Managed};
use gpukit_core::dynamic::{DynArray, ElementType};
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// DLPack's data type of an element type.
fn dl_dtype(t: ElementType) -> DLDataType {
    let (code, bits) = match t {
        ElementType::Bool => (DLDataTypeCode::BOOL, 8),
        ElementType::U8 => (DLDataTypeCode::UINT, 8),
        ElementType::I32 => (DLDataTypeCode::INT, 32),
        ElementType::U32 => (DLDataTypeCode::UINT, 32),
        ElementType::I64 => (DLDataTypeCode::INT, 64),
        ElementType::U64 => (DLDataTypeCode::UINT, 64),
        ElementType::F16 => (DLDataTypeCode::FLOAT, 16),
        ElementType::BF16 => (DLDataTypeCode::BFLOAT, 16),
        ElementType::F32 => (DLDataTypeCode::FLOAT, 32),
        ElementType::F64 => (DLDataTypeCode::FLOAT, 64),
    };
    DLDataType {
        code,
        bits,
        lanes: 1,
    }
}

/// The element type of a DLPack data type, if gpukit has it.
fn from_dl_dtype(d: DLDataType) -> PyResult<ElementType> {
    let t = match (d.code, d.bits, d.lanes) {
        (DLDataTypeCode::BOOL, 8, 1) => ElementType::Bool,
        (DLDataTypeCode::UINT, 8, 1) => ElementType::U8,
        (DLDataTypeCode::INT, 32, 1) => ElementType::I32,
        (DLDataTypeCode::UINT, 32, 1) => ElementType::U32,
        (DLDataTypeCode::INT, 64, 1) => ElementType::I64,
        (DLDataTypeCode::UINT, 64, 1) => ElementType::U64,
        (DLDataTypeCode::FLOAT, 16, 1) => ElementType::F16,
        (DLDataTypeCode::BFLOAT, 16, 1) => ElementType::BF16,
        (DLDataTypeCode::FLOAT, 32, 1) => ElementType::F32,
        (DLDataTypeCode::FLOAT, 64, 1) => ElementType::F64,
        _ => {
            return Err(PyTypeError::new_err(format!(
                "DLPack data type (code {}, {} bits, {} lanes) has no gpukit element type",
                d.code.0, d.bits, d.lanes
            )))
        }
    };
    Ok(t)
}

/// The CUDA array interface's type string.
fn typestr(t: ElementType) -> PyResult<&'static str> {
    Ok(match t {
        ElementType::Bool => "|b1",
        ElementType::U8 => "|u1",
        ElementType::I32 => "<i4",
        ElementType::U32 => "<u4",
        ElementType::I64 => "<i8",
        ElementType::U64 => "<u8",
        ElementType::F16 => "<f2",
        ElementType::F32 => "<f4",
        ElementType::F64 => "<f8",
        ElementType::BF16 => {
            return Err(PyTypeError::new_err(
                "bfloat16 has no type string in the CUDA array interface; use DLPack \
                 (__dlpack__ / from_dlpack) or convert first",
            ))
        }
    })
}

/// The raw handle of the calling thread's current stream on `a`'s device.
fn current_stream_raw(a: &DynArray) -> u64 {
    a.device().stream().raw()
}

/// What `__dlpack__` exports: a view of the array (keeping its memory alive).
struct Exporter {
    a: DynArray,
}

impl Exporter {
    fn build<M: dlpark::ManagedTensorBase>(&self) -> PyResult<Managed<M>> {
        self.build_with(DlpackFlags::empty())
    }

    /// The managed tensor with `flags` (IS_COPIED only for a copy made for this export, which
    /// nothing else references).
    fn build_with<M: dlpark::ManagedTensorBase>(&self, flags: DlpackFlags) -> PyResult<Managed<M>> {
        let shape: Vec<i64> = self.a.shape().iter().map(|&d| d as i64).collect();
        let strides: Vec<i64> = self.a.strides().iter().map(|&s| s as i64).collect();
        let prepared = dlpark::metadata::Dynamic::new(shape, strides)
            .prepare_as::<M>()
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let mut init = prepared.initialize(Box::new(self.a.clone()));
        init.set_device(DLDevice::cuda(self.a.device().ordinal() as i32));
        init.set_dtype(dl_dtype(self.a.dtype()));
        init.set_data(self.a.device_ptr() as *mut std::ffi::c_void);
        init.set_byte_offset(0);
        if !flags.is_empty() {
            // SAFETY: the only flag set here is IS_COPIED, for an array copied for this export
            // alone (the caller's contract above); READ_ONLY is never set (writable memory).
            unsafe { init.set_flags_unchecked(flags) };
        }
        // SAFETY: the data pointer is the array's first element in live device memory that the
        // context (a clone of the array, holding its buffer) keeps alive until the deleter runs;
        // shape and strides are copied into the allocation and describe exactly the array's
        // elements (explicit strides in elements, which the array's own view checks keep inside
        // its buffer).
        Ok(unsafe { init.finish() })
    }
}

impl DlpackExporter for Exporter {
    fn device(&self) -> DLDevice {
        DLDevice::cuda(self.a.device().ordinal() as i32)
    }

    fn flags(&self) -> DlpackFlags {
        // writable memory, shared (not a copy made for the consumer's sake)
        DlpackFlags::empty()
    }

    fn prepare_export(&self, _py: Python<'_>, request: &ExportRequest<'_>) -> PyResult<()> {
        // DLPack: no stream argument means the legacy default stream; -1 means no ordering.
        let raw: u64 = match request.cuda_stream()? {
            CudaStreamRequest::NoSync => return Ok(()),
            CudaStreamRequest::Omitted | CudaStreamRequest::LegacyDefault => 1,
            CudaStreamRequest::PerThreadDefault => 2,
            CudaStreamRequest::Pointer(p) => p as u64,
        };
        // SAFETY: the consumer passed this handle as a live stream of the array's device
        // (DLPack's contract for `stream=`), or one of the default-stream sentinels.
        unsafe { self.a.make_ready_on_raw(raw) }.py()
    }

    fn export_legacy(&self, _py: Python<'_>) -> PyResult<Managed<dlpark::ffi::DLManagedTensor>> {
        self.build()
    }

    fn export_versioned(
        &self,
        _py: Python<'_>,
    ) -> PyResult<Managed<dlpark::ffi::DLManagedTensorVersioned>> {
        self.build()
    }
}

/// `Array.__dlpack__`.
pub fn export_dlpack(
    py: Python<'_>,
    a: &DynArray,
    stream: Option<&Bound<'_, PyAny>>,
    max_version: Option<(u32, u32)>,
    dl_device: Option<(u32, i32)>,
    copy: Option<bool>,
) -> PyResult<Py<PyAny>> {
    let ours = (DLDeviceType::CUDA.0, a.device().ordinal() as i32);
    if let Some(dev) = dl_device {
        if dev != ours {
            if dev.0 == DLDeviceType::CPU.0 && copy != Some(false) {
                // to the host: NumPy's own export of a host copy
                let host = crate::array::download(py, a)?;
                let kwargs = PyDict::new(py);
                if let Some(v) = max_version {
                    kwargs.set_item("max_version", v)?;
                }
                return Ok(host.call_method("__dlpack__", (), Some(&kwargs))?.unbind());
            }
            return Err(PyBufferError::new_err(format!(
                "the array is on CUDA device {}; it cannot be exported to device {dev:?} without \
                 a copy",
                ours.1
            )));
        }
    }
    if copy == Some(true) {
        // a fresh copy, exported as memory of its own and flagged IS_COPIED (dlpark's producer
        // helper exports zero-copy only; the handshake and the ABI choice are the same)
        let exporter = Exporter { a: a.copy().py()? };
        let request = ExportRequest::parse(stream, max_version, dl_device, None)?;
        exporter.prepare_export(py, &request)?;
        return match request.abi() {
            dlpark::python::ExportAbi::Versioned => Ok(exporter
                .build_with::<dlpark::ffi::DLManagedTensorVersioned>(DlpackFlags::IS_COPIED)?
                .into_pyobject(py)?
                .into_any()
                .unbind()),
            dlpark::python::ExportAbi::Legacy => Ok(exporter
                .build::<dlpark::ffi::DLManagedTensor>()?
                .into_pyobject(py)?
                .into_any()
                .unbind()),
        };
    }
    let request = ExportRequest::parse(stream, max_version, dl_device, copy)?;
    dlpark::python::export_dlpack(&Exporter { a: a.clone() }, py, request)
}

/// `Array.__cuda_array_interface__` (version 3).
pub fn cuda_array_interface<'py>(py: Python<'py>, a: &DynArray) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let ts = typestr(a.dtype())?;
    d.set_item("shape", PyTuple::new(py, a.shape())?)?;
    d.set_item("typestr", ts)?;
    d.set_item("descr", vec![("", ts)])?;
    let ptr = if a.is_empty() { 0 } else { a.device_ptr() };
    d.set_item("data", (ptr, false))?;
    d.set_item("version", 3)?;
    if a.is_contiguous() {
        d.set_item("strides", py.None())?;
    } else {
        let bytes: Vec<isize> = a
            .strides()
            .iter()
            .map(|&s| s * a.itemsize() as isize)
            .collect();
        d.set_item("strides", PyTuple::new(py, bytes)?)?;
    }
    // The consumer orders its work after this stream; make it carry every pending use of the
    // array first (work queued on other gpukit streams included).
    let raw = current_stream_raw(a);
    // SAFETY: `raw` is the handle of a live gpukit stream of the array's device.
    unsafe { a.make_ready_on_raw(raw) }.py()?;
    d.set_item("stream", if raw == 0 { 1 } else { raw })?;
    Ok(d)
}

/// The consumer stream gpukit hands to DLPack producers: the calling thread's current stream.
struct ConsumerStream {
    dev: gpukit_core::Device,
}

// SAFETY: the stream handle is the calling thread's current stream of the imported array's
// device (a live stream for the whole `__dlpack__` call: gpukit's streams live as long as the
// device), encoded with DLPack's CUDA conventions by dlpark.
unsafe impl dlpark::python::DlpackStream for ConsumerStream {
    fn as_python_arg(
        &self,
        _py: Python<'_>,
        _device: DLDevice,
    ) -> PyResult<dlpark::python::StreamArg> {
        let raw = self.dev.stream().raw();
        Ok(dlpark::python::consumer::stream::cuda(
            raw as usize as *mut std::ffi::c_void,
        ))
    }

    unsafe fn wait_for_producer(
        &self,
        _device: DLDevice,
        producer: *mut std::ffi::c_void,
    ) -> PyResult<bool> {
        // The C exchange API reports CUDA's legacy default stream as NULL (PyTorch's default
        // stream); in DLPack's Python encoding that stream is 1.
        let raw = if producer.is_null() {
            1
        } else {
            producer as u64
        };
        // SAFETY: `producer` is the live stream the producer's C exchange API reported for
        // this device (the caller's contract), or the legacy default stream.
        unsafe { self.dev.stream().wait_raw_stream(raw) }.py()?;
        Ok(true)
    }
}

/// Builds an array over foreign memory: `data` is the address of element 0 (after any byte
/// offset), `strides` in elements.
///
/// # Safety
/// `data` with `shape` / `strides` must describe live memory of `dev` holding elements of `t`,
/// which stays valid while `keep_alive` lives.
unsafe fn foreign(
    dev: &gpukit_core::Device,
    data: u64,
    shape: &[usize],
    strides: &[isize],
    t: ElementType,
    keep_alive: Box<dyn std::any::Any + Send + Sync>,
) -> PyResult<DynArray> {
    // SAFETY: forwarded from the caller.
    unsafe { DynArray::from_foreign(dev, data, shape, strides, t, keep_alive) }.py()
}

/// Imports another library's GPU array without a copy: DLPack first (a CUDA device from
/// `__dlpack_device__`), else the CUDA array interface. `Ok(None)` for objects that are
/// neither (host arrays, numbers).
pub fn import_device_array(obj: &Bound<'_, PyAny>) -> PyResult<Option<DynArray>> {
    if obj.hasattr("__dlpack_device__")? {
        let (kind, _id): (i32, i32) = obj.call_method0("__dlpack_device__")?.extract()?;
        if kind == DLDeviceType::CUDA.0 as i32 || kind == 13 {
            return from_dlpack_obj(obj, None).map(Some);
        }
        return Ok(None);
    }
    if obj.hasattr("__cuda_array_interface__")? {
        return from_cai(obj).map(Some);
    }
    Ok(None)
}

/// Imports a DLPack producer (an object with `__dlpack__`, or a capsule).
fn from_dlpack_obj(obj: &Bound<'_, PyAny>, copy: Option<bool>) -> PyResult<DynArray> {
    if copy == Some(true) {
        // the consumer's copy: import without a copy, then copy on the GPU (every producer can
        // share its memory; not every one can copy it for us, or on the device we want)
        return from_dlpack_obj(obj, None)?.copy().py();
    }
    let request = dlpark::python::ImportRequest::new(obj.as_borrowed())?;
    // a capsule (or a legacy producer) tells its device only once imported, and takes no
    // stream: its producer ordered it already
    let (imported, dev) = match request.device() {
        Ok(dl_dev) => {
            let dev = cuda_device(dl_dev)?;
            let stream = ConsumerStream { dev: dev.clone() };
            (request.import(Some(&stream), copy)?, dev)
        }
        Err(_) => {
            let request = dlpark::python::ImportRequest::new(obj.as_borrowed())?;
            let imported = request.import(None, copy)?;
            let dl_dev = imported
                .validate()
                .map_err(|e| PyValueError::new_err(e.to_string()))?
                .device();
            let dev = cuda_device(dl_dev)?;
            (imported, dev)
        }
    };
    let view = imported
        .validate()
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let t = from_dl_dtype(view.dtype())?;
    let shape: Vec<usize> = view
        .shape()
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| PyValueError::new_err("negative DLPack extent")))
        .collect::<PyResult<_>>()?;
    let strides: Vec<isize> = view
        .strides_or_compact()
        .map_err(|e| PyValueError::new_err(e.to_string()))?
        .iter()
        .map(|&s| s as isize)
        .collect();
    let data = view.data_ptr() as u64 + view.byte_offset();
    let read_only = imported.flags().contains(DlpackFlags::READ_ONLY);
    let keep = imported.into_deleter();
    // SAFETY: the producer describes live CUDA memory of device `ordinal` with these shape,
    // strides and element type (DLPack's contract); its deleter (kept with the buffer) keeps
    // it alive until every view of it is gone.
    let a = unsafe { foreign(&dev, data, &shape, &strides, t, Box::new(keep))? };
    if read_only {
        // gpukit arrays are writable: a read-only tensor is copied
        return a.copy().py();
    }
    Ok(a)
}

/// The gpukit device of a DLPack device (CUDA or CUDA managed memory).
fn cuda_device(dl_dev: DLDevice) -> PyResult<gpukit_core::Device> {
    let ordinal = match dl_dev.device_type {
        DLDeviceType::CUDA => dl_dev.device_id,
        t if t.0 == 13 => dl_dev.device_id, // kDLCUDAManaged
        t => {
            return Err(PyBufferError::new_err(format!(
                "from_dlpack: the tensor is on DLPack device type {} (not a CUDA device); use \
                 gpukit.asarray to copy host data",
                t.0
            )))
        }
    };
    crate::array::device(Some(ordinal.max(0) as usize))
}

/// Imports an object exposing `__cuda_array_interface__` (version 2 or 3).
fn from_cai(obj: &Bound<'_, PyAny>) -> PyResult<DynArray> {
    let d = obj.getattr("__cuda_array_interface__")?;
    let d = d.cast::<PyDict>()?;
    let get = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        d.get_item(k)?
            .ok_or_else(|| PyValueError::new_err(format!("__cuda_array_interface__ has no {k:?}")))
    };
    let shape: Vec<usize> = get("shape")?.extract()?;
    let ts: String = get("typestr")?.extract()?;
    let t = ElementType::parse(&ts).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "the CUDA array interface type {ts:?} has no gpukit element type"
        ))
    })?;
    let (ptr, read_only): (u64, bool) = get("data")?.extract()?;
    if let Some(mask) = d.get_item("mask")? {
        if !mask.is_none() {
            return Err(PyValueError::new_err(
                "masked CUDA arrays are not supported",
            ));
        }
    }
    let strides: Vec<isize> = match d.get_item("strides")? {
        Some(s) if !s.is_none() => {
            let bytes: Vec<isize> = s.extract()?;
            let item = t.itemsize() as isize;
            if bytes.iter().any(|b| b % item != 0) {
                return Err(PyValueError::new_err(
                    "strides that are not a multiple of the item size are not supported",
                ));
            }
            bytes.iter().map(|b| b / item).collect()
        }
        _ => gpukit_core::shape::contiguous_strides(&shape),
    };
    // the device the pointer belongs to: the default device (the interface does not say; a
    // pointer of another device is refused by the range check of the foreign buffer)
    let dev = crate::array::device(None)?;
    if let Some(s) = d.get_item("stream")? {
        if !s.is_none() {
            let raw: u64 = s.extract()?;
            if raw == 0 {
                return Err(PyValueError::new_err(
                    "__cuda_array_interface__ stream 0 is disallowed by the interface (ambiguous)",
                ));
            }
            // SAFETY: the producer states that its data is ready on this live stream of the
            // device (version 3's contract); our current stream waits for it.
            unsafe { dev.stream().wait_raw_stream(raw) }.py()?;
        }
    }
    let owner: Py<PyAny> = obj.clone().unbind();
    // SAFETY: the producer describes live device memory with this shape, strides and type;
    // the owner object, kept with the buffer, keeps it alive.
    let a = unsafe { foreign(&dev, ptr, &shape, &strides, t, Box::new(owner))? };
    if read_only {
        return a.copy().py();
    }
    Ok(a)
}

/// ``gpukit.from_dlpack(x, *, copy=None)``: an array sharing the memory of a DLPack producer
/// (a PyTorch or CuPy tensor on a CUDA device, a JAX array, another gpukit array), ordered
/// after the producer's pending work on the calling thread's current stream.
#[pyfunction]
#[pyo3(signature = (x, *, copy=None))]
pub fn from_dlpack(py: Python<'_>, x: &Bound<'_, PyAny>, copy: Option<bool>) -> PyResult<Array> {
    let _ = py;
    from_dlpack_obj(x, copy).map(Array::new)
}
