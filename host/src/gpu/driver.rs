//! The bottom layer: loading the driver, mapping its errors to [`Error`], and keeping a panic inside the
//! bindings from reaching the caller. Everything above calls the driver through cudarc and these helpers.

use cudarc::driver::sys::CUresult;
use cudarc::driver::{CudaContext, DriverError};

use crate::error::{Error, Result};

/// Maps a driver error of operation `op` to [`Error::Cuda`].
pub(crate) fn cuda(op: &'static str) -> impl FnOnce(DriverError) -> Error {
    move |source| Error::Cuda { op, source }
}

/// Maps an allocation failure to [`Error::OutOfMemory`], anything else to [`Error::Cuda`].
pub(crate) fn alloc_err(what: &'static str, bytes: usize) -> impl FnOnce(DriverError) -> Error {
    move |source| {
        if source.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            Error::OutOfMemory { what, bytes }
        } else {
            Error::Cuda { op: "cuMemAlloc", source }
        }
    }
}

/// The driver's description of an error (its name and string).
pub(crate) fn describe(e: &DriverError) -> String {
    e.to_string()
}

/// Whether a CUDA driver library can be loaded on this machine (no GPU needed to answer).
pub fn driver_present() -> bool {
    // SAFETY: only tries to open the shared library by name.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Number of CUDA devices, or the reason there are none.
pub fn device_count() -> Result<usize> {
    if !driver_present() {
        return Err(Error::NoCudaDriver("libcuda.so could not be loaded (is the NVIDIA driver installed?)".into()));
    }
    guard(|| {
        cudarc::driver::result::init().map_err(cuda("cuInit"))?;
        CudaContext::device_count().map(|n| n as usize).map_err(cuda("cuDeviceGetCount"))
    })
}

/// The driver's CUDA version, e.g. 13000 for 13.0.
pub(crate) fn driver_version() -> Result<i32> {
    let mut version = 0;
    // SAFETY: writes one int through a valid pointer.
    unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) }.result().map_err(cuda("cuDriverGetVersion"))?;
    Ok(version)
}

/// Runs `f`, turning a panic inside cudarc (it panics when a driver symbol is missing, e.g. a driver too old for
/// the CUDA version it was built for) into [`Error::NoCudaDriver`].
pub(crate) fn guard<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic in the CUDA bindings".into());
            Err(Error::NoCudaDriver(format!("the CUDA driver is unusable: {msg}")))
        }
    }
}

/// The device allocation `ptr` lies in, as the driver reports it (`cuMemGetAddressRange`): its first byte and its
/// size in bytes. This is what was really allocated, whatever length a `CudaSlice` claims (cudarc computes
/// `len * size_of::<T>()` unchecked when it allocates, so a slice can claim far more than its allocation holds).
/// Needs the allocation's context current on the calling thread. An address the driver does not know is
/// [`Error::Cuda`] (`CUDA_ERROR_NOT_FOUND` or `CUDA_ERROR_INVALID_VALUE`).
pub(crate) fn allocation_of(ptr: cudarc::driver::sys::CUdeviceptr) -> Result<(u64, u64)> {
    let (mut base, mut size) = (0, 0usize);
    // SAFETY: writes one CUdeviceptr and one size_t through valid pointers; any address may be asked about.
    unsafe { cudarc::driver::sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) }
        .result()
        .map_err(cuda("cuMemGetAddressRange"))?;
    Ok((base, size as u64))
}
