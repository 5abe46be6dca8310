//! Around the CUDA libraries: whether one is there ([`Library`]), a panic of their bindings as an error
//! ([`catch`]), a poisoned output ([`poison`]), a PTX kernel loaded ([`load_kernel`]).

use cudarc::driver::{CudaFunction, CudaViewMut, DevicePtrMut};
use cudarc::nvrtc::Ptx;

use crate::error::{Error, Result};
use sparsek::gpu::Gpu;

/// Runs `f`, turning a panic (cudarc panics when a library or symbol is missing) into [`Error::Panic`].
pub(crate) fn catch<T>(f: impl FnOnce() -> T) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
        Error::Panic(
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic in the CUDA library bindings".into()),
        )
    })
}

/// A CUDA library that cudarc opens on first use: how to tell it is there and has a symbol (cudarc panics when
/// either is missing; [`Library::require`] asks first, and catches what panics anyway).
pub(crate) struct Library {
    /// Its name in errors ("libcublas").
    pub name: &'static str,
    /// The files the loader looks for, in errors.
    pub files: &'static str,
    /// Whether the loader finds it.
    pub present: fn() -> bool,
    /// Whether it has a symbol.
    pub has: fn(&str) -> bool,
}

/// The [`Library`] of the cudarc bindings module `$sys` (`cudarc::cublas::sys`, imported under that name).
macro_rules! library {
    ($sys:ident, $name:literal, $files:literal) => {
        crate::cuda::Library {
            name: $name,
            files: $files,
            // SAFETY: only tries to open the shared library by the names cudarc knows.
            present: || unsafe { $sys::is_culib_present() },
            // SAFETY: looks a symbol up in the loaded library without calling it.
            has: |sym| unsafe { $sys::culib().get::<unsafe extern "C" fn()>(sym.as_bytes()).is_ok() },
        }
    };
}
pub(crate) use library;

impl Library {
    /// Errors unless the library is found with every one of `symbols`.
    pub fn require(&self, symbols: &[&'static str]) -> Result<()> {
        if !catch(self.present)? {
            return Err(Error::LibraryNotFound { lib: self.name, names: self.files });
        }
        for &symbol in symbols {
            if !catch(|| (self.has)(symbol))? {
                return Err(Error::MissingSymbol { lib: self.name, symbol });
            }
        }
        Ok(())
    }
}

/// Fills a device buffer with the byte 0x7B: 1.3e36 as f32, 61280 as f16 — finite (so a library that reads C
/// despite beta == 0 still gets 0 * C = 0) but far outside any checked value, so elements left unwritten fail
/// the check.
pub(crate) fn poison<T>(gpu: &Gpu, mut s: CudaViewMut<'_, T>) -> Result<()> {
    let bytes = s.len() * std::mem::size_of::<T>();
    let stream = gpu.stream();
    let (ptr, _guard) = s.device_ptr_mut(stream);
    // SAFETY: `ptr` addresses the slice's `bytes` bytes, allocated on this stream and alive during the call;
    // every byte pattern is a valid f16/f32.
    unsafe { cudarc::driver::result::memset_d8_async(ptr, 0x7b, bytes, stream.cu_stream()) }
        .map_err(Error::driver("cuMemsetD8Async"))
}

/// Loads the PTX kernel `name` (the module's only function) into the GPU's context.
pub(crate) fn load_kernel(gpu: &Gpu, ptx: &str, name: &'static str) -> Result<CudaFunction> {
    let module =
        gpu.context().load_module(Ptx::from_src(ptx)).map_err(Error::driver(format!("loading {name}'s PTX")))?;
    module.load_function(name).map_err(Error::driver(format!("looking up {name}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catch_turns_panics_into_messages() {
        assert_eq!(catch(|| 3).unwrap(), 3);
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let r = catch(|| -> i32 { panic!("Unable to dynamically load the cublas shared library") });
        std::panic::set_hook(prev);
        assert!(matches!(&r, Err(Error::Panic(m)) if m.contains("cublas")), "{r:?}");
    }
}
