//! torch's stable C ABI, resolved at run time: the `aoti_torch_*` shim functions that libtorch exports (tensor
//! attributes, allocation through torch's caching allocator, the dispatcher, operator registration) and the
//! current CUDA stream's getter, looked up with `dlopen(RTLD_NOLOAD)` + `dlsym` in the libtorch that the running
//! `torch` already loaded. Nothing here is linked against torch, so one abi3 wheel serves every torch version;
//! where a symbol is missing (an older or newer torch), [`Torch::load`] says which, and the Python layer keeps its
//! own registration of the operators.
//!
//! Errors leave a boxed kernel as C++ exceptions (the only way an error crosses torch's dispatcher): [`throw`]
//! builds a `std::invalid_argument` (Python `ValueError`), `std::runtime_error` (`RuntimeError`) or
//! `std::bad_alloc` (`MemoryError`) with libstdc++'s exported constructors and throws it with the Itanium ABI's
//! `__cxa_throw`, from `extern "C-unwind"` frames that have no landing pad (so no Rust personality routine runs
//! while libstdc++'s unwinder walks them; see [`throw`]). pybind11, which runs the operator for Python, turns these
//! into the Python exceptions named (checked by python/tests/test_native_ops.py, which CI runs on the zig-linked
//! manylinux wheel as well).

use std::ffi::{CStr, CString, c_char, c_void};
use std::sync::OnceLock;

/// A boxed kernel: `(stack, num_args, num_outputs)` with the convention of `torch/csrc/stable/library.h`.
pub type BoxedKernel = unsafe extern "C-unwind" fn(*mut u64, u64, u64);
/// `AtenTensorHandle`: an owning pointer to an `at::Tensor` made by libtorch.
pub type Handle = *mut c_void;
type Err = i32;

/// The functions this module uses, each found by name (`None` in `Torch::load`'s error lists what was not).
#[allow(clippy::type_complexity)]
pub struct Torch {
    pub get_data_ptr: unsafe extern "C" fn(Handle, *mut *mut c_void) -> Err,
    pub get_dim: unsafe extern "C" fn(Handle, *mut i64) -> Err,
    pub get_sizes: unsafe extern "C" fn(Handle, *mut *const i64) -> Err,
    pub get_strides: unsafe extern "C" fn(Handle, *mut *const i64) -> Err,
    pub get_dtype: unsafe extern "C" fn(Handle, *mut i32) -> Err,
    pub get_device_type: unsafe extern "C" fn(Handle, *mut i32) -> Err,
    pub get_device_index: unsafe extern "C" fn(Handle, *mut i32) -> Err,
    pub delete_tensor: unsafe extern "C" fn(Handle) -> Err,
    pub new_tensor_handle: unsafe extern "C" fn(Handle, *mut Handle) -> Err,
    pub empty_strided: unsafe extern "C" fn(i64, *const i64, *const i64, i32, i32, i32, *mut Handle) -> Err,
    pub call_dispatcher: unsafe extern "C" fn(*const c_char, *const c_char, *mut u64) -> Err,
    library_init_impl: unsafe extern "C" fn(*const c_char, *const c_char, *const c_char, u32, *mut *mut c_void) -> Err,
    library_impl: unsafe extern "C" fn(*mut c_void, *const c_char, BoxedKernel) -> Err,
    /// `aoti_torch_get_current_cuda_stream(device, &stream)` (libtorch_cuda; `None` in a CPU-only torch).
    pub current_cuda_stream: Option<unsafe extern "C" fn(i32, *mut *mut c_void) -> Err>,
    /// dtype codes (torch's, read from the `aoti_torch_dtype_*` functions).
    pub dtypes: DtypeCodes,
    /// device type codes.
    pub device_cpu: i32,
    pub device_cuda: i32,
    cxx: Cxx,
}

/// The dtype codes of the stable ABI for the dtypes sparsek reads or names in its messages.
#[derive(Clone, Copy)]
pub struct DtypeCodes {
    pub f16: i32,
    pub bf16: i32,
    pub f32: i32,
    pub f64: i32,
    pub i32: i32,
    pub i64: i32,
    pub i16: i32,
    pub i8: i32,
    pub u8: i32,
    pub bool: i32,
}

impl DtypeCodes {
    /// torch's own name of a dtype (`torch.float16`), as the Python layer's messages print it.
    pub fn name(&self, code: i32) -> String {
        let known = [
            (self.f16, "float16"),
            (self.bf16, "bfloat16"),
            (self.f32, "float32"),
            (self.f64, "float64"),
            (self.i32, "int32"),
            (self.i64, "int64"),
            (self.i16, "int16"),
            (self.i8, "int8"),
            (self.u8, "uint8"),
            (self.bool, "bool"),
        ];
        match known.iter().find(|(c, _)| *c == code) {
            Some((_, n)) => format!("torch.{n}"),
            None => format!("torch dtype #{code}"),
        }
    }

    /// Bytes of one element of the dtypes sparsek reads (0 for the others).
    pub fn size(&self, code: i32) -> usize {
        if code == self.f16 || code == self.bf16 || code == self.i16 {
            2
        } else if code == self.f32 || code == self.i32 {
            4
        } else if code == self.f64 || code == self.i64 {
            8
        } else if code == self.i8 || code == self.u8 || code == self.bool {
            1
        } else {
            0
        }
    }
}

/// libstdc++'s exception machinery (the Itanium C++ ABI), for [`throw`].
struct Cxx {
    allocate_exception: unsafe extern "C" fn(usize) -> *mut c_void,
    throw: unsafe extern "C-unwind" fn(*mut c_void, *const c_void, Option<unsafe extern "C" fn(*mut c_void)>) -> !,
    invalid_argument_ctor: unsafe extern "C" fn(*mut c_void, *const c_char),
    invalid_argument_ti: *const c_void,
    invalid_argument_dtor: unsafe extern "C" fn(*mut c_void),
    runtime_error_ctor: unsafe extern "C" fn(*mut c_void, *const c_char),
    runtime_error_ti: *const c_void,
    runtime_error_dtor: unsafe extern "C" fn(*mut c_void),
    bad_alloc_ti: *const c_void,
    bad_alloc_dtor: unsafe extern "C" fn(*mut c_void),
    bad_alloc_vtable: *const c_void,
    /// `operator delete(void*)`: frees the heap `StableIValue` that libtorch allocates for an optional argument.
    pub operator_delete: unsafe extern "C" fn(*mut c_void),
}

// SAFETY: function pointers and addresses of immutable type descriptions, valid for the life of the process.
unsafe impl Send for Torch {}
// SAFETY: as above.
unsafe impl Sync for Torch {}

/// Looks one symbol up in `lib` (a `dlopen` handle), recording its name in `missing` if absent
/// (or listed in `hide`, which lets the tests simulate an older torch).
fn sym(lib: *mut c_void, name: &str, hide: &[String], missing: &mut Vec<String>) -> *mut c_void {
    let c = CString::new(name).expect("symbol names have no NUL");
    // SAFETY: `lib` is a live handle from dlopen; the name is NUL-terminated.
    let p = if hide.iter().any(|h| h == name) { std::ptr::null_mut() } else { unsafe { libc::dlsym(lib, c.as_ptr()) } };
    if p.is_null() {
        missing.push(name.to_owned());
    }
    p
}

/// `dlopen(path, RTLD_NOLOAD | RTLD_NOW)`: the library only if the process has loaded it already.
fn loaded(path: &str) -> Option<*mut c_void> {
    let c = CString::new(path).ok()?;
    // SAFETY: a NUL-terminated path; RTLD_NOLOAD loads nothing new.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_NOW) };
    (!h.is_null()).then_some(h)
}

/// A symbol's address as the function pointer type `F`.
///
/// # Safety
/// `p` is the non-null address of a function with `F`'s signature.
unsafe fn cast<F: Copy>(p: *mut c_void) -> F {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: the caller's contract; F is a function pointer type of a pointer's size.
    unsafe { std::mem::transmute_copy(&p) }
}

static TORCH: OnceLock<Torch> = OnceLock::new();

/// The resolved functions, once [`Torch::load`] succeeded.
pub fn torch() -> Option<&'static Torch> {
    TORCH.get()
}

impl Torch {
    /// Resolves every function from the libtorch libraries in `lib_dir` (torch's `lib` directory, which the
    /// running torch has loaded) and libstdc++. Returns the names of the symbols not found, or of a library not
    /// loaded, as the error; `hide` names symbols to treat as missing (tests).
    pub fn load(lib_dir: &str, hide: &[String]) -> Result<&'static Torch, Vec<String>> {
        if let Some(t) = TORCH.get() {
            return Ok(t);
        }
        let cpu =
            loaded(&format!("{lib_dir}/libtorch_cpu.so")).ok_or_else(|| vec![format!("{lib_dir}/libtorch_cpu.so")])?;
        let cuda = loaded(&format!("{lib_dir}/libtorch_cuda.so"));
        let mut missing = Vec::new();
        let mut m = |lib: *mut c_void, name: &str| sym(lib, name, hide, &mut missing);
        // dtype and device codes are functions returning the code.
        let dtype_fns = [
            "aoti_torch_dtype_float16",
            "aoti_torch_dtype_bfloat16",
            "aoti_torch_dtype_float32",
            "aoti_torch_dtype_float64",
            "aoti_torch_dtype_int32",
            "aoti_torch_dtype_int64",
            "aoti_torch_dtype_int16",
            "aoti_torch_dtype_int8",
            "aoti_torch_dtype_uint8",
            "aoti_torch_dtype_bool",
        ]
        .map(|name| m(cpu, name));
        let dev_fns = ["aoti_torch_device_type_cpu", "aoti_torch_device_type_cuda"].map(|name| m(cpu, name));
        // libstdc++ through libtorch's handle (dlsym searches a library's dependencies; libtorch is loaded with
        // RTLD_LOCAL, so RTLD_DEFAULT would not see them).
        let [
            allocate_exception,
            throw,
            invalid_argument_ctor,
            invalid_argument_ti,
            invalid_argument_dtor,
            runtime_error_ctor,
            runtime_error_ti,
            runtime_error_dtor,
            bad_alloc_ti,
            bad_alloc_dtor,
            bad_alloc_vtable,
            operator_delete,
        ] = [
            "__cxa_allocate_exception",
            "__cxa_throw",
            "_ZNSt16invalid_argumentC1EPKc",
            "_ZTISt16invalid_argument",
            "_ZNSt16invalid_argumentD1Ev",
            "_ZNSt13runtime_errorC1EPKc",
            "_ZTISt13runtime_error",
            "_ZNSt13runtime_errorD1Ev",
            "_ZTISt9bad_alloc",
            "_ZNSt9bad_allocD1Ev",
            "_ZTVSt9bad_alloc",
            "_ZdlPv",
        ]
        .map(|name| m(cpu, name));
        let [
            get_data_ptr,
            get_dim,
            get_sizes,
            get_strides,
            get_dtype,
            get_device_type,
            get_device_index,
            delete_tensor,
            new_tensor_handle,
            empty_strided,
            call_dispatcher,
            library_init_impl,
            library_impl,
        ] = [
            "aoti_torch_get_data_ptr",
            "aoti_torch_get_dim",
            "aoti_torch_get_sizes",
            "aoti_torch_get_strides",
            "aoti_torch_get_dtype",
            "aoti_torch_get_device_type",
            "aoti_torch_get_device_index",
            "aoti_torch_delete_tensor_object",
            "aoti_torch_new_tensor_handle",
            "aoti_torch_empty_strided",
            "aoti_torch_call_dispatcher",
            "aoti_torch_library_init_impl",
            "aoti_torch_library_impl",
        ]
        .map(|name| m(cpu, name));
        let stream = cuda.map(|c| m(c, "aoti_torch_get_current_cuda_stream"));
        if !missing.is_empty() {
            return Err(missing);
        }
        // SAFETY (every transmute below): a non-null address of the named function or object of libtorch's stable
        // C ABI or libstdc++ with the signature stated by torch's headers (shim.h) and the Itanium C++ ABI.
        unsafe {
            let code = |p: *mut c_void| cast::<unsafe extern "C" fn() -> i32>(p)();
            let d = dtype_fns.map(&code);
            let cxx = Cxx {
                allocate_exception: cast(allocate_exception),
                throw: cast(throw),
                invalid_argument_ctor: cast(invalid_argument_ctor),
                invalid_argument_ti,
                invalid_argument_dtor: cast(invalid_argument_dtor),
                runtime_error_ctor: cast(runtime_error_ctor),
                runtime_error_ti,
                runtime_error_dtor: cast(runtime_error_dtor),
                bad_alloc_ti,
                bad_alloc_dtor: cast(bad_alloc_dtor),
                bad_alloc_vtable,
                operator_delete: cast(operator_delete),
            };
            let t = Torch {
                get_data_ptr: cast(get_data_ptr),
                get_dim: cast(get_dim),
                get_sizes: cast(get_sizes),
                get_strides: cast(get_strides),
                get_dtype: cast(get_dtype),
                get_device_type: cast(get_device_type),
                get_device_index: cast(get_device_index),
                delete_tensor: cast(delete_tensor),
                new_tensor_handle: cast(new_tensor_handle),
                empty_strided: cast(empty_strided),
                call_dispatcher: cast(call_dispatcher),
                library_init_impl: cast(library_init_impl),
                library_impl: cast(library_impl),
                current_cuda_stream: stream.map(|p| cast(p)),
                dtypes: DtypeCodes {
                    f16: d[0],
                    bf16: d[1],
                    f32: d[2],
                    f64: d[3],
                    i32: d[4],
                    i64: d[5],
                    i16: d[6],
                    i8: d[7],
                    u8: d[8],
                    bool: d[9],
                },
                device_cpu: code(dev_fns[0]),
                device_cuda: code(dev_fns[1]),
                cxx,
            };
            Ok(TORCH.get_or_init(|| t))
        }
    }

    /// Registers `kernels` (operator name, boxed kernel) of namespace `ns` for dispatch key `key` ("CPU",
    /// "CUDA"). The registration lives as long as the process (its library object is never deleted).
    pub fn register(&self, ns: &CStr, key: &CStr, kernels: &[(&CStr, BoxedKernel)]) -> Result<(), String> {
        let mut lib: *mut c_void = std::ptr::null_mut();
        // SAFETY: NUL-terminated strings that outlive the call (the file name is static); `lib` receives a handle.
        let e =
            unsafe { (self.library_init_impl)(ns.as_ptr(), key.as_ptr(), c"sparsek/_native".as_ptr(), 0, &mut lib) };
        if e != 0 || lib.is_null() {
            return Err(format!("aoti_torch_library_init_impl({ns:?}, {key:?}) failed"));
        }
        for (name, k) in kernels {
            // SAFETY: a live library handle, a NUL-terminated name, a kernel with the boxed convention.
            if unsafe { (self.library_impl)(lib, name.as_ptr(), *k) } != 0 {
                return Err(format!("aoti_torch_library_impl({name:?}) for {key:?} failed"));
            }
        }
        Ok(())
    }
}

/// The Python exception a native kernel raises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// `ValueError` (`std::invalid_argument`).
    Value,
    /// `RuntimeError` (`std::runtime_error`). Also stands for `TypeError`, which no C++ standard exception
    /// becomes: the Python wrappers turn it back (`take_type_error`).
    Runtime,
    /// `MemoryError` (`std::bad_alloc`, without the message).
    Memory,
}

/// What a boxed kernel leaves to throw once its work is done and every Rust value of it dropped: nothing (`msg`
/// null) or a C++ exception of `kind` whose message `msg` was allocated by [`Pending::new`]. Plain data, so that
/// the frames that hold it need no landing pad ([`throw`]).
#[repr(C)]
pub struct Pending {
    kind: Kind,
    msg: *mut c_char,
}

impl Pending {
    /// Nothing to throw.
    pub const NONE: Pending = Pending { kind: Kind::Runtime, msg: std::ptr::null_mut() };

    /// An exception of `kind` with `msg` (NULs in it become spaces).
    pub fn new(kind: Kind, msg: String) -> Pending {
        let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        Pending { kind, msg: c.into_raw() }
    }

    /// There is an exception to throw.
    pub fn is_some(&self) -> bool {
        !self.msg.is_null()
    }
}

/// Throws `p` as a C++ exception (its message is freed first); with nothing to throw (or without torch loaded, which
/// cannot happen for a kernel torch called) it returns.
///
/// The exception unwinds with the unwinder of libstdc++ (libgcc_s), through this frame and the caller's: neither
/// may have a landing pad, because a landing pad makes the frame's unwind entry name Rust's personality routine,
/// which calls this extension's own unwinder (statically linked in a zig-built wheel) with libgcc_s's context.
/// Hence only plain data here, `#[inline(never)]`, and every call one that cannot unwind, but the last.
///
/// # Safety
/// Called only from a boxed kernel's `extern "C-unwind"` frame that holds nothing to drop (`boxed_kernel!`).
#[inline(never)]
pub unsafe extern "C-unwind" fn throw(p: Pending) {
    let Some(t) = torch() else { return };
    if p.msg.is_null() {
        return;
    }
    let x = &t.cxx;
    // SAFETY: the Itanium ABI: allocate room for the exception object (std::runtime_error and its subclasses are
    // one vtable pointer and one reference-counted string: 16 bytes on x86-64 and aarch64; 64 leaves room),
    // construct it in place, throw it with its type description and destructor. The message is copied by the
    // constructor, so it is freed before the throw (`p.msg` came from `CString::into_raw`).
    unsafe {
        let obj = (x.allocate_exception)(64);
        let (ti, dtor) = match p.kind {
            Kind::Value => {
                (x.invalid_argument_ctor)(obj, p.msg);
                (x.invalid_argument_ti, x.invalid_argument_dtor)
            }
            Kind::Runtime => {
                (x.runtime_error_ctor)(obj, p.msg);
                (x.runtime_error_ti, x.runtime_error_dtor)
            }
            Kind::Memory => {
                // std::bad_alloc is one vtable pointer: the address point of its vtable (2 words past the start).
                *(obj as *mut *const c_void) = (x.bad_alloc_vtable as *const *const c_void).add(2) as *const c_void;
                (x.bad_alloc_ti, x.bad_alloc_dtor)
            }
        };
        drop(CString::from_raw(p.msg));
        (x.throw)(obj, ti, Some(dtor))
    }
}

/// Frees the heap `StableIValue` that libtorch allocated for a present optional argument.
///
/// # Safety
/// `p` is such a pointer, not yet freed.
pub unsafe fn free_optional(t: &Torch, p: *mut u64) {
    // SAFETY: the caller's contract; libtorch allocated it with `new StableIValue`.
    unsafe { (t.cxx.operator_delete)(p.cast()) }
}

/// `true` when the error code of a shim call means success.
pub fn ok(e: i32) -> bool {
    e == 0
}
