//! DLPack, the tensor exchange every framework reads (`numpy.from_dlpack`, `torch.from_dlpack`,
//! `jax.dlpack`): the C structs of `dlpack.h` (v0.8, the unversioned "dltensor" capsule) and
//! [`Tensor`], a Python object that exports its memory through them without a copy.

use std::ffi::c_void;
use std::sync::Arc;

use pyo3::prelude::*;

/// `DLDeviceType::kDLCPU`.
const CPU: i32 = 1;

/// Memory on a device (the `gpu` feature's uploads): where it is, and how a consumer's stream
/// is made to wait until it is written.
pub trait DeviceMemory: Send + Sync {
    fn ptr(&self) -> *mut c_void;
    /// DLPack's device type and id.
    fn device(&self) -> (i32, i32);
    /// Makes the consumer's `stream` (in DLPack's convention: none, -1, or a stream handle)
    /// wait until the memory is ready.
    fn ready_for(&self, stream: Option<isize>) -> Result<(), String>;
}

#[repr(C)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

impl DLDataType {
    pub const U8: DLDataType = DLDataType { code: 1, bits: 8, lanes: 1 };
    pub const I64: DLDataType = DLDataType { code: 0, bits: 64, lanes: 1 };
    pub const F32: DLDataType = DLDataType { code: 2, bits: 32, lanes: 1 };

    fn name(self) -> &'static str {
        match (self.code, self.bits) {
            (1, 8) => "uint8",
            (0, 64) => "int64",
            (2, 32) => "float32",
            _ => "unknown",
        }
    }
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// What keeps a tensor's memory alive: a ring slot the loader holds until the last view of it
/// is gone, memory of the tensor's own, or memory on a device.
pub enum Owner {
    Slot(Arc<dyn Send + Sync>),
    #[cfg_attr(not(feature = "gpu"), allow(dead_code))]
    Device(Arc<dyn DeviceMemory>),
    Bytes(Vec<u8>),
    F32(Vec<f32>),
    I64(Vec<i64>),
}

impl Owner {
    fn ptr(&self, slot_ptr: *mut u8) -> *mut c_void {
        match self {
            Owner::Slot(_) => slot_ptr.cast(),
            Owner::Device(memory) => memory.ptr(),
            Owner::Bytes(v) => v.as_ptr() as *mut c_void,
            Owner::F32(v) => v.as_ptr() as *mut c_void,
            Owner::I64(v) => v.as_ptr() as *mut c_void,
        }
    }
}

/// The memory behind a tensor, shared by the Python object and every DLPack export of it.
struct Memory {
    owner: Owner,
    /// For a slot: where it is mapped.
    slot_ptr: *mut u8,
}

// SAFETY: the pointer is into a mapping kept alive by `owner`; the memory is only read here.
unsafe impl Send for Memory {}
unsafe impl Sync for Memory {}

/// A tensor (row-major, on the CPU or a device) that speaks DLPack.
#[pyclass(module = "prepfs", frozen)]
pub struct Tensor {
    memory: Arc<Memory>,
    shape: Vec<i64>,
    dtype: DLDataType,
}

impl Memory {
    fn device(&self) -> (i32, i32) {
        match &self.owner {
            Owner::Device(memory) => memory.device(),
            _ => (CPU, 0),
        }
    }
}

impl Tensor {
    pub fn new(owner: Owner, slot_ptr: *mut u8, shape: Vec<i64>, dtype: DLDataType) -> Tensor {
        Tensor { memory: Arc::new(Memory { owner, slot_ptr }), shape, dtype }
    }
}

/// What one export holds: the shape and strides it points at, and the memory.
struct Export {
    shape: Vec<i64>,
    strides: Vec<i64>,
    _memory: Arc<Memory>,
}

unsafe extern "C" fn delete_managed(managed: *mut DLManagedTensor) {
    if managed.is_null() {
        return;
    }
    // SAFETY: both were made by `Box::into_raw` in `__dlpack__`, and the deleter runs once.
    let managed = unsafe { Box::from_raw(managed) };
    drop(unsafe { Box::from_raw(managed.manager_ctx.cast::<Export>()) });
}

const CAPSULE_NAME: &std::ffi::CStr = c"dltensor";

unsafe extern "C" fn capsule_destructor(capsule: *mut pyo3::ffi::PyObject) {
    // A consumer renames the capsule "used_dltensor" and owns the tensor from then on; an
    // unconsumed one still holds it.
    // SAFETY: called by Python with the capsule being destroyed.
    unsafe {
        if pyo3::ffi::PyCapsule_IsValid(capsule, CAPSULE_NAME.as_ptr()) == 1 {
            let managed = pyo3::ffi::PyCapsule_GetPointer(capsule, CAPSULE_NAME.as_ptr()).cast::<DLManagedTensor>();
            delete_managed(managed);
        }
    }
}

#[pymethods]
impl Tensor {
    /// The tensor as a DLPack capsule. On a device, the consumer's `stream` is made to wait for
    /// the upload; `max_version` and the rest are accepted, and the capsule is the unversioned
    /// kind every consumer reads.
    #[pyo3(signature = (*, stream=None, **_kwargs))]
    fn __dlpack__(&self, py: Python<'_>, stream: Option<isize>, _kwargs: Option<&Bound<'_, pyo3::types::PyDict>>) -> PyResult<PyObject> {
        if let Owner::Device(memory) = &self.memory.owner {
            memory.ready_for(stream).map_err(pyo3::exceptions::PyRuntimeError::new_err)?;
        }
        let (device_type, device_id) = self.memory.device();
        let mut strides = vec![1i64; self.shape.len()];
        for i in (0..self.shape.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * self.shape[i + 1];
        }
        let mut export = Box::new(Export { shape: self.shape.clone(), strides, _memory: Arc::clone(&self.memory) });
        let managed = Box::new(DLManagedTensor {
            dl_tensor: DLTensor {
                data: self.memory.owner.ptr(self.memory.slot_ptr),
                device: DLDevice { device_type, device_id },
                ndim: self.shape.len() as i32,
                dtype: self.dtype,
                shape: export.shape.as_mut_ptr(),
                strides: export.strides.as_mut_ptr(),
                byte_offset: 0,
            },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_managed),
        });
        let managed = Box::into_raw(managed);
        // SAFETY: `managed` is a fresh allocation; its context is set before it is shared.
        unsafe {
            (*managed).manager_ctx = Box::into_raw(export).cast();
            let capsule = pyo3::ffi::PyCapsule_New(managed.cast(), CAPSULE_NAME.as_ptr(), Some(capsule_destructor));
            if capsule.is_null() {
                delete_managed(managed);
                return Err(PyErr::fetch(py));
            }
            Ok(PyObject::from_owned_ptr(py, capsule))
        }
    }

    /// `(kDLCPU, 0)`, or `(kDLCUDA, N)` for a batch on a GPU.
    fn __dlpack_device__(&self) -> (i32, i32) {
        self.memory.device()
    }

    /// The shape, outermost first.
    #[getter]
    fn shape(&self) -> Vec<i64> {
        self.shape.clone()
    }

    /// `uint8`, `int64` or `float32`.
    #[getter]
    fn dtype(&self) -> &'static str {
        self.dtype.name()
    }

    fn __len__(&self) -> usize {
        self.shape.first().copied().unwrap_or(0) as usize
    }

    fn __repr__(&self) -> String {
        format!("prepfs.Tensor(shape={:?}, dtype={})", self.shape, self.dtype.name())
    }
}
