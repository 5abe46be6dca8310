//! The CPU and CUDA kernels of `sparsek::linear`, `sparsek::bsr_mm` and `sparsek::bsr_mm_out`, registered with torch's
//! dispatcher in native code through torch's stable C ABI ([`crate::torch_abi`]): a call reads its tensors through the
//! shim, checks exactly what `sparsek/_ops.py` checks (same exceptions, same messages), allocates the output with
//! torch's allocator (`aoti_torch_empty_strided`), and launches on torch's current CUDA stream through `Gpu::spmm_raw`
//! (or runs the CPU backend), with no Python in the call.
//!
//! Only the common case runs natively. A call that needs a copy (an operand whose rows are not 16-byte aligned,
//! non-contiguous values, indices or bias, an `x` that cannot be viewed as 2-D), a structure not yet checked on the
//! device, a device sparsek has not opened yet, or a capture that must pin a checked structure is handed, stack and
//! all, to the Python implementation, registered as the twin operators `sparsek::_linear_py`, `sparsek::_bsr_mm_py` and
//! `sparsek::_bsr_mm_out_py` (`aoti_torch_call_dispatcher`); the Python layer then records the structure it checked
//! here ([`remember_checked`]), so that the next call of that weight runs natively.
//!
//! Private API of the `sparsek` package (`sparsek/_ops.py` registers these when torch exports every symbol used).

use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use pyo3::prelude::*;
use sparsek::gpu::{CUstream, Gpu};
use sparsek::{Activation, Epilogue, Error};

use crate::torch_abi::{self, Handle, Kind, Torch, torch};
use crate::{CheckedStructure, ErrorClass, Product, RowSchedule};

/// Why a native kernel did not finish the call itself.
enum Stop {
    /// Raise this exception (`type_error`: the Python layer's `TypeError`, raised as `RuntimeError`).
    Raise { kind: Kind, msg: String, type_error: bool },
    /// Hand the call to the Python implementation.
    Delegate,
}

fn value(msg: String) -> Stop {
    Stop::Raise { kind: Kind::Value, msg, type_error: false }
}

fn type_err(msg: String) -> Stop {
    Stop::Raise { kind: Kind::Runtime, msg, type_error: true }
}

/// The library's error as the exception `to_py` makes of it (`TypeError` for element types).
fn lib_err(e: Error) -> Stop {
    let msg = format!("sparsek: {e}");
    match crate::error_class(&e) {
        ErrorClass::Type => type_err(msg),
        ErrorClass::Value => value(msg),
        ErrorClass::Memory => Stop::Raise { kind: Kind::Memory, msg, type_error: false },
        ErrorClass::Runtime => Stop::Raise { kind: Kind::Runtime, msg, type_error: false },
    }
}

thread_local! {
    /// The message of the last `TypeError` this thread's native kernels raised as `RuntimeError`
    /// ([`take_type_error`]).
    static TYPE_ERROR: RefCell<Option<String>> = const { RefCell::new(None) };
    /// The exception the Python twin raised in a delegated call on this thread ([`stash_error`]).
    static STASHED: RefCell<Option<(Kind, String, bool)>> = const { RefCell::new(None) };
    /// Whether a native kernel of this thread is waiting for the Python twin it called.
    static DELEGATING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A tensor argument, read through the shim (borrowed: the stack still owns the handle).
struct T<'a> {
    h: Handle,
    ptr: u64,
    sizes: &'a [i64],
    strides: &'a [i64],
    dtype: i32,
    dev_type: i32,
    dev_index: i32,
}

impl T<'_> {
    fn dim(&self) -> usize {
        self.sizes.len()
    }
    fn shape(&self) -> String {
        py_tuple(self.sizes)
    }
    fn device(&self, t: &Torch) -> String {
        device_name(t, self.dev_type, self.dev_index)
    }
    fn same_device(&self, o: &T) -> bool {
        self.dev_type == o.dev_type && self.dev_index == o.dev_index
    }
    fn numel(&self) -> i64 {
        self.sizes.iter().product()
    }
    fn contiguous(&self) -> bool {
        let mut expect = 1;
        for (&s, &st) in self.sizes.iter().zip(self.strides).rev() {
            if s != 1 && st != expect {
                return false;
            }
            expect *= s;
        }
        true
    }
}

fn device_name(t: &Torch, ty: i32, index: i32) -> String {
    if ty == t.device_cpu {
        "cpu".into()
    } else if ty == t.device_cuda {
        format!("cuda:{index}")
    } else {
        format!("device type {ty}:{index}")
    }
}

/// A shape as Python prints a tuple: `()`, `(5,)`, `(3, 4)`.
fn py_tuple(s: &[i64]) -> String {
    match s {
        [] => "()".into(),
        [a] => format!("({a},)"),
        _ => format!("({})", s.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

/// Reads a tensor handle's attributes.
///
/// # Safety
/// `h` is a live `AtenTensorHandle`; the returned slices live as long as the tensor's sizes do (the call).
unsafe fn read<'a>(t: &Torch, h: Handle) -> Result<T<'a>, Stop> {
    let mut data = std::ptr::null_mut();
    let (mut dim, mut sizes, mut strides) = (0i64, std::ptr::null(), std::ptr::null());
    let (mut dtype, mut dev_type, mut dev_index) = (0, 0, 0);
    // SAFETY: the caller's contract; each call writes one value.
    let ok = unsafe {
        torch_abi::ok((t.get_data_ptr)(h, &mut data))
            && torch_abi::ok((t.get_dim)(h, &mut dim))
            && torch_abi::ok((t.get_sizes)(h, &mut sizes))
            && torch_abi::ok((t.get_strides)(h, &mut strides))
            && torch_abi::ok((t.get_dtype)(h, &mut dtype))
            && torch_abi::ok((t.get_device_type)(h, &mut dev_type))
            && torch_abi::ok((t.get_device_index)(h, &mut dev_index))
    };
    if !ok {
        return Err(Stop::Delegate);
    }
    let n = dim as usize;
    // SAFETY: torch's sizes and strides arrays hold `dim` values while the tensor lives.
    let (sizes, strides) = unsafe {
        if n == 0 {
            (&[][..], &[][..])
        } else {
            (std::slice::from_raw_parts(sizes, n), std::slice::from_raw_parts(strides, n))
        }
    };
    Ok(T { h, ptr: data as u64, sizes, strides, dtype, dev_type, dev_index })
}

/// `_ops._dense`: `(address, ld, col_major)` of the 2-D `(r, c)` with strides `(s0, s1)` (or its transpose), or
/// `None` when the library cannot read it in place.
#[allow(clippy::too_many_arguments)]
fn dense(
    ptr: u64,
    r: i64,
    c: i64,
    s0: i64,
    s1: i64,
    align: i64,
    esize: i64,
    transposed: bool,
) -> Option<(u64, usize, bool)> {
    let (r, c, s0, s1) = if transposed { (c, r, s1, s0) } else { (r, c, s0, s1) };
    let round_up = |v: i64, m: i64| (v + m - 1) / m * m;
    if r == 0 || c == 0 {
        return Some((ptr, round_up(c.max(1), align) as usize, false));
    }
    if !ptr.is_multiple_of((align * esize) as u64) {
        return None;
    }
    if s1 == 1 || c == 1 {
        let ld = if r > 1 { s0 } else { round_up(c, align) };
        if ld >= c && ld % align == 0 {
            return Some((ptr, ld as usize, false));
        }
    }
    if s0 == 1 || r == 1 {
        let ld = if c > 1 { s1 } else { round_up(r, align) };
        if ld >= r && ld % align == 0 {
            return Some((ptr, ld as usize, true));
        }
    }
    None
}

/// The checks of `_ops._check_bsr`, in its order, with its messages; returns the block size.
fn check_bsr(t: &Torch, values: &T, crow: &T, col: &T, rows: i64, cols: i64) -> Result<i64, Stop> {
    let d = &t.dtypes;
    if values.dtype == d.f64 && values.dev_type != t.device_cuda {
        // float64 on the CPU: the Python twin's pure-torch path (for gradcheck), which checks the rest.
        return Err(Stop::Delegate);
    }
    if values.dtype != d.f16 && values.dtype != d.bf16 {
        return Err(type_err(format!("sparsek: BSR values must be float16 or bfloat16, not {}", d.name(values.dtype))));
    }
    if (crow.dtype != d.i32 && crow.dtype != d.i64) || col.dtype != crow.dtype {
        return Err(type_err(format!(
            "sparsek: crow_indices and col_indices must both be int32 or both int64, not {} and {}",
            d.name(crow.dtype),
            d.name(col.dtype)
        )));
    }
    let (vs, cs, cols_s) = (values.sizes, crow.sizes, col.sizes);
    if vs.len() != 3 || vs[1] != vs[2] {
        return Err(value(format!(
            "sparsek: BSR values must have shape (nnzb, bs, bs) with square blocks, not {} (batched or hybrid BSR \
             tensors are not supported)",
            values.shape()
        )));
    }
    let bs = vs[1];
    if !matches!(bs, 16 | 32 | 64 | 128) {
        return Err(value(format!("sparsek: block size {bs} is not supported (16, 32, 64 or 128)")));
    }
    if rows.rem_euclid(bs) != 0 || cols.rem_euclid(bs) != 0 {
        return Err(value(format!("sparsek: the matrix is {rows}x{cols}, not a multiple of the block size {bs}")));
    }
    let block_rows = rows.div_euclid(bs);
    if cs.len() != 1 || cs[0] != block_rows + 1 {
        return Err(value(format!(
            "sparsek: crow_indices has shape {}; a {rows}x{cols} matrix of {bs}-blocks needs ({},)",
            crow.shape(),
            block_rows + 1
        )));
    }
    if cols_s.len() != 1 || cols_s[0] != vs[0] {
        return Err(value(format!("sparsek: col_indices has shape {}; the values hold {} blocks", col.shape(), vs[0])));
    }
    if !crow.same_device(values) || !col.same_device(values) {
        return Err(value(format!(
            "sparsek: the BSR components are on different devices ({}, {}, {})",
            values.device(t),
            crow.device(t),
            col.device(t)
        )));
    }
    Ok(bs)
}

/// `_ops._check_dense`.
fn check_dense(t: &Torch, b: &T, what: &str, values: &T) -> Result<(), Stop> {
    if b.dtype != values.dtype {
        return Err(type_err(format!(
            "sparsek: {what} is {}; it must have the BSR values' dtype {}",
            t.dtypes.name(b.dtype),
            t.dtypes.name(values.dtype)
        )));
    }
    if !b.same_device(values) {
        return Err(value(format!("sparsek: {what} is on {}, the BSR matrix on {}", b.device(t), values.device(t))));
    }
    Ok(())
}

/// A checked block-sparse operand: its three tensors, its shape and block size.
struct BsrOperand<'a> {
    values: &'a T<'a>,
    crow: &'a T<'a>,
    col: &'a T<'a>,
    rows: i64,
    cols: i64,
    bs: i64,
}

/// `_ops._check_mm` (with the output's dtype): the block-sparse operand, `b` (2-D, like the values, `cols` rows)
/// and the output type. Returns the block size.
#[allow(clippy::too_many_arguments)]
fn check_mm(
    t: &Torch,
    values: &T,
    crow: &T,
    col: &T,
    rows: i64,
    cols: i64,
    b: &T,
    out_dtype: i32,
) -> Result<i64, Stop> {
    let bs = check_bsr(t, values, crow, col, rows, cols)?;
    if b.dim() != 2 {
        return Err(value(format!("sparsek: b must be 2-D, not of shape {}", b.shape())));
    }
    check_dense(t, b, "b", values)?;
    if b.sizes[0] != cols {
        return Err(value(format!("sparsek: shape mismatch: a is {rows}x{cols}, b is {}x{}", b.sizes[0], b.sizes[1])));
    }
    if out_dtype != t.dtypes.f32 && out_dtype != values.dtype {
        return Err(type_err(format!(
            "sparsek: the output must be float32 or the inputs' {}, not {}",
            t.dtypes.name(values.dtype),
            t.dtypes.name(out_dtype)
        )));
    }
    Ok(bs)
}

/// `b` of a `bsr_mm` as the kernel reads it in place, or `Delegate` when it (or the BSR operand) needs a copy.
fn mm_operand(t: &Torch, values: &T, crow: &T, col: &T, b: &T) -> Result<(u64, usize, bool), Stop> {
    if !bsr_in_place(t, values, crow, col, None) {
        return Err(Stop::Delegate);
    }
    let esize = t.dtypes.size(b.dtype) as i64;
    dense(b.ptr, b.sizes[0], b.sizes[1], b.strides[0], b.strides[1], align(t, b), esize, false).ok_or(Stop::Delegate)
}

/// The block-sparse operand and epilogue of one product, ready to launch.
struct Call<'a> {
    a: BsrOperand<'a>,
    bias: u64,
    b: (u64, usize, bool),
    n: i64,
    c: (u64, usize, bool),
    in_name: &'static str,
    out_name: &'static str,
    alpha: f32,
    beta: f32,
    activation: Activation,
}

impl<'a> Call<'a> {
    /// A `bsr_mm`'s product: no bias, no activation, the output of `out_dtype`.
    #[allow(clippy::too_many_arguments)]
    fn mm(
        t: &Torch,
        a: BsrOperand<'a>,
        b: (u64, usize, bool),
        n: i64,
        c: (u64, usize, bool),
        out_dtype: i32,
        alpha: f64,
        beta: f64,
    ) -> Call<'a> {
        let (in_name, out_name) = (type_name(t, a.values.dtype), type_name(t, out_dtype));
        let (alpha, beta) = (alpha as f32, beta as f32);
        Call { a, bias: 0, b, n, c, in_name, out_name, alpha, beta, activation: Activation::Identity }
    }
}

/// Key of a checked structure, as `_ops._ensure_checked` makes it: (crow address, col address, 64-bit indices,
/// rows, cols, block size, nnzb), the two version counters (`None` for inference tensors), the device.
pub type CheckedKey = ((u64, u64, bool, usize, usize, usize, usize), (Option<i64>, Option<i64>), usize);

struct Checked {
    structure: Py<CheckedStructure>,
    schedule: Option<Py<RowSchedule>>,
    captured: bool,
}

static CHECKED: Mutex<Option<HashMap<CheckedKey, Checked>>> = Mutex::new(None);

/// Calls the native kernels finished themselves, and calls they handed to the Python kernels ([`native_counts`]).
static FINISHED: AtomicU64 = AtomicU64::new(0);
static HANDED_OVER: AtomicU64 = AtomicU64::new(0);

/// Benchmarks only ([`set_native_dry_run`]): the native kernels do everything but the product itself.
static DRY_RUN: AtomicBool = AtomicBool::new(false);

/// Calls `op` (`aten::_version` or `aten::is_inference`) on `h` through the dispatcher.
fn dispatch_int(t: &Torch, op: &std::ffi::CStr, h: Handle) -> Option<i64> {
    let mut nh: Handle = std::ptr::null_mut();
    // SAFETY: `h` is live; the new handle is owned by the stack, which the dispatcher call consumes.
    unsafe {
        if !torch_abi::ok((t.new_tensor_handle)(h, &mut nh)) {
            return None;
        }
        let mut stack = [nh as u64];
        if !torch_abi::ok((t.call_dispatcher)(op.as_ptr(), c"".as_ptr(), stack.as_mut_ptr())) {
            return None;
        }
        Some(stack[0] as i64)
    }
}

/// `_ops._versions`: both version counters, or `(None, None)` when either tensor is an inference tensor.
fn versions(t: &Torch, crow: &T, col: &T) -> Option<(Option<i64>, Option<i64>)> {
    for x in [crow, col] {
        // bool results are one byte.
        if dispatch_int(t, c"aten::is_inference", x.h)? & 0xff != 0 {
            return Some((None, None));
        }
    }
    Some((Some(dispatch_int(t, c"aten::_version", crow.h)?), Some(dispatch_int(t, c"aten::_version", col.h)?)))
}

/// The opened `Gpu` of `device` (the Python path opens it on first use).
fn opened_gpu(device: usize) -> Option<std::sync::Arc<Gpu>> {
    crate::opened_gpu(device)
}

fn run(t: &Torch, call: &Call) -> Result<(), Stop> {
    let values = call.a.values;
    let index64 = call.a.crow.dtype == t.dtypes.i64;
    let shape = (call.a.rows as usize, call.a.cols as usize, call.a.bs as usize, values.sizes[0] as usize);
    let ep = Epilogue::new(call.alpha, call.beta).with_activation(call.activation);
    let mut p = Product {
        b: call.b.0,
        b_ld: call.b.1,
        b_col_major: call.b.2,
        n: call.n as usize,
        c: call.c.0,
        c_ld: call.c.1,
        c_col_major: call.c.2,
        bias: call.bias,
        ..Product::structure(values.ptr, (call.a.crow.ptr, call.a.col.ptr, index64), shape, ep)
    };
    if values.dev_type == t.device_cpu {
        if DRY_RUN.load(Ordering::Relaxed) {
            return Ok(());
        }
        // SAFETY: live CPU tensors of the checked sizes, held by the stack during the call.
        return unsafe { p.cpu_named(call.in_name, call.out_name) }.map_err(lib_err);
    }
    if values.dev_type != t.device_cuda {
        return Err(value(format!("sparsek: tensors on {} are not supported (CUDA or CPU)", values.device(t))));
    }
    let dev = values.dev_index as usize;
    let gpu = opened_gpu(dev).ok_or(Stop::Delegate)?;
    let get_stream = t.current_cuda_stream.ok_or(Stop::Delegate)?;
    let mut raw = std::ptr::null_mut();
    // SAFETY: writes the current stream of `dev`.
    if !torch_abi::ok(unsafe { get_stream(dev as i32, &mut raw) }) {
        return Err(Stop::Delegate);
    }
    let stream = raw as CUstream;
    let key: CheckedKey = (
        (call.a.crow.ptr, call.a.col.ptr, index64, p.m, p.k, p.bs, p.nnzb),
        versions(t, call.a.crow, call.a.col).ok_or(Stop::Delegate)?,
        dev,
    );
    // The lock is held until the launch is queued: the entry keeps the checked copy and the schedule alive (they
    // are freed only when forgotten, after a device synchronisation).
    let guard = CHECKED.lock().unwrap_or_else(PoisonError::into_inner);
    let entry = guard.as_ref().and_then(|m| m.get(&key)).ok_or(Stop::Delegate)?;
    // A capture pins the structure: the Python layer does that (moves the entry to _CAPTURED).
    if !entry.captured && sparsek::gpu::stream_capturing(stream) {
        return Err(Stop::Delegate);
    }
    let arrays = entry.structure.get().0.arrays(0);
    p.row_ptr = arrays.row_ptr;
    p.col_idx = arrays.col_idx;
    if DRY_RUN.load(Ordering::Relaxed) {
        return Ok(());
    }
    let sched = entry.schedule.as_ref().map(|s| &s.get().0);
    // SAFETY: live tensors of the checked sizes on `dev`, the checked copy of their structure (the entry, held
    // under the lock), torch's current stream of `dev`.
    let r = unsafe { p.launch_named(call.in_name, call.out_name, &gpu, stream, sched) };
    drop(guard);
    r.map_err(lib_err)
}

/// Allocates a contiguous tensor of `sizes` like `like`'s device, of `dtype`.
fn empty(t: &Torch, sizes: &[i64], dtype: i32, like: &T) -> Result<Handle, Stop> {
    let mut strides = vec![1i64; sizes.len()];
    for i in (0..sizes.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * sizes[i + 1].max(1);
    }
    let mut h: Handle = std::ptr::null_mut();
    // SAFETY: arrays of `sizes.len()` values; `h` receives a new owning handle.
    let e = unsafe {
        (t.empty_strided)(
            sizes.len() as i64,
            sizes.as_ptr(),
            strides.as_ptr(),
            dtype,
            like.dev_type,
            like.dev_index,
            &mut h,
        )
    };
    if !torch_abi::ok(e) || h.is_null() {
        // The allocation failed (out of memory, most likely): the Python path raises torch's own error.
        return Err(Stop::Delegate);
    }
    Ok(h)
}

fn delete(t: &Torch, h: Handle) {
    // SAFETY: an owning handle not used afterwards.
    unsafe { (t.delete_tensor)(h) };
}

fn type_name(t: &Torch, dtype: i32) -> &'static str {
    let d = &t.dtypes;
    if dtype == d.f16 {
        "f16"
    } else if dtype == d.bf16 {
        "bf16"
    } else {
        "f32"
    }
}

fn align(t: &Torch, x: &T) -> i64 {
    if x.dev_type == t.device_cuda { 16 / t.dtypes.size(x.dtype).max(1) as i64 } else { 1 }
}

/// Whether the values, indices and bias can be read as they are (`_launch` copies them otherwise).
fn bsr_in_place(t: &Torch, values: &T, crow: &T, col: &T, bias: Option<&T>) -> bool {
    let aligned = |x: &T| x.contiguous() && (x.dev_type != t.device_cuda || x.ptr.is_multiple_of(16));
    aligned(values) && crow.contiguous() && col.contiguous() && bias.is_none_or(|b| b.numel() == 0 || aligned(b))
}

/// `sparsek::linear(x, values, crow, col, in_features, bias, activation)`: returns the output handle.
///
/// # Safety
/// `stack` holds the operator's 7 arguments in the boxed convention (borrowed here).
unsafe fn linear(t: &Torch, stack: *mut u64) -> Result<Option<Handle>, Stop> {
    // SAFETY: the caller's contract.
    let arg = |i: usize| unsafe { *stack.add(i) };
    // SAFETY: tensor arguments are live handles.
    let (x, values, crow, col) = unsafe {
        (read(t, arg(0) as Handle)?, read(t, arg(1) as Handle)?, read(t, arg(2) as Handle)?, read(t, arg(3) as Handle)?)
    };
    let in_features = arg(4) as i64;
    let bias = match arg(5) as *const u64 {
        p if p.is_null() => None,
        // SAFETY: a present optional: a pointer to the StableIValue holding the handle.
        p => Some(unsafe { read(t, *p as Handle)? }),
    };
    let act = arg(6) as i64;
    // _check_linear
    let (vs, cs) = (values.sizes, crow.sizes);
    if vs.len() != 3 || cs.len() != 1 || cs[0] < 1 {
        return Err(value(format!(
            "sparsek: the weight's values must be (nnzb, bs, bs) and its crow_indices (rows / bs + 1,), not {} and {}",
            values.shape(),
            crow.shape()
        )));
    }
    let out_features = (cs[0] - 1) * vs[1];
    let bs = check_bsr(t, &values, &crow, &col, out_features, in_features)?;
    let xs = x.sizes;
    if xs.is_empty() || xs[xs.len() - 1] != in_features {
        return Err(value(format!(
            "sparsek: x has shape {}; the weight is {out_features}x{in_features} (out x in), so x's last dimension \
             must be {in_features}",
            x.shape()
        )));
    }
    check_dense(t, &x, "x", &values)?;
    if let Some(b) = &bias {
        check_dense(t, b, "bias", &values)?;
        if b.sizes != [out_features] {
            return Err(value(format!(
                "sparsek: bias has shape {}; the layer has {out_features} output features",
                b.shape()
            )));
        }
    }
    let activation = match usize::try_from(act).ok().and_then(|a| Activation::ALL.get(a)) {
        Some(a) => *a,
        None => {
            let codes = (0..Activation::ALL.len()).map(|c| c.to_string()).collect::<Vec<_>>().join(", ");
            return Err(value(format!("sparsek: activation code {act} is not one of [{codes}]")));
        }
    };
    if !bsr_in_place(t, &values, &crow, &col, bias.as_ref()) {
        return Err(Stop::Delegate);
    }
    // x.reshape(-1, in_features) as a view: the leading dimensions must collapse into one stride.
    let d = x.dim();
    let tokens: i64 = xs[..d - 1].iter().product();
    let mut lead_stride = if d >= 2 { x.strides[d - 2] } else { in_features };
    let mut expect: Option<i64> = None;
    for i in (0..d - 1).rev() {
        if xs[i] == 1 {
            continue;
        }
        match expect {
            None => lead_stride = x.strides[i],
            Some(e) if e != x.strides[i] => return Err(Stop::Delegate),
            _ => {}
        }
        expect = Some(x.strides[i] * xs[i]);
    }
    let x_stride = if d >= 1 { x.strides[d - 1] } else { 1 };
    let al = align(t, &x);
    let esize = t.dtypes.size(x.dtype) as i64;
    let b = dense(x.ptr, tokens, in_features, lead_stride, x_stride, al, esize, true).ok_or(Stop::Delegate)?;
    let mut ysizes = xs[..d - 1].to_vec();
    ysizes.push(out_features);
    let y = empty(t, &ysizes, x.dtype, &x)?;
    let fail = |s: Stop| {
        delete(t, y);
        s
    };
    let mut yptr = std::ptr::null_mut();
    // SAFETY: a live handle.
    if !torch_abi::ok(unsafe { (t.get_data_ptr)(y, &mut yptr) }) {
        return Err(fail(Stop::Delegate));
    }
    let c = match dense(yptr as u64, tokens, out_features, out_features, 1, al, esize, true) {
        Some(c) => c,
        None => return Err(fail(Stop::Delegate)),
    };
    let name = type_name(t, x.dtype);
    let call = Call {
        a: BsrOperand { values: &values, crow: &crow, col: &col, rows: out_features, cols: in_features, bs },
        bias: bias.as_ref().map_or(0, |b| if b.numel() == 0 { 0 } else { b.ptr }),
        b,
        n: tokens,
        c,
        in_name: name,
        out_name: name,
        alpha: 1.0,
        beta: 0.0,
        activation,
    };
    run(t, &call).map_err(fail)?;
    Ok(Some(y))
}

/// `sparsek::bsr_mm(values, crow, col, rows, cols, b, alpha, out_dtype)`: returns the output handle.
///
/// # Safety
/// As [`linear`], with the operator's 8 arguments.
unsafe fn bsr_mm(t: &Torch, stack: *mut u64) -> Result<Option<Handle>, Stop> {
    // SAFETY: the caller's contract.
    let arg = |i: usize| unsafe { *stack.add(i) };
    // SAFETY: tensor arguments are live handles.
    let (values, crow, col, b) = unsafe {
        (read(t, arg(0) as Handle)?, read(t, arg(1) as Handle)?, read(t, arg(2) as Handle)?, read(t, arg(5) as Handle)?)
    };
    let (rows, cols) = (arg(3) as i64, arg(4) as i64);
    let alpha = f64::from_bits(arg(6));
    let out_dtype = match arg(7) as *const u64 {
        p if p.is_null() => None,
        // SAFETY: a present optional ScalarType: a pointer to the StableIValue holding torch's dtype code.
        p => Some(unsafe { *p } as u32 as i32),
    };
    let out_dtype = out_dtype.unwrap_or(values.dtype);
    let bs = check_mm(t, &values, &crow, &col, rows, cols, &b, out_dtype)?;
    let bd = mm_operand(t, &values, &crow, &col, &b)?;
    let n = b.sizes[1];
    let out = empty(t, &[rows, n], out_dtype, &b)?;
    let fail = |s: Stop| {
        delete(t, out);
        s
    };
    let mut optr = std::ptr::null_mut();
    // SAFETY: a live handle.
    if !torch_abi::ok(unsafe { (t.get_data_ptr)(out, &mut optr) }) {
        return Err(fail(Stop::Delegate));
    }
    let oal = if b.dev_type == t.device_cuda { 16 / t.dtypes.size(out_dtype).max(1) as i64 } else { 1 };
    let c = match dense(optr as u64, rows, n, n, 1, oal, t.dtypes.size(out_dtype) as i64, false) {
        Some(c) => c,
        None => return Err(fail(Stop::Delegate)),
    };
    let a = BsrOperand { values: &values, crow: &crow, col: &col, rows, cols, bs };
    run(t, &Call::mm(t, a, bd, n, c, out_dtype, alpha, 0.0)).map_err(fail)?;
    Ok(Some(out))
}

/// `_ops._extent`: `(first byte, one past the last byte)` of the memory `x`'s elements span.
fn extent(t: &Torch, x: &T) -> (u64, u64) {
    let esize = t.dtypes.size(x.dtype).max(1) as u64;
    if x.numel() == 0 {
        return (x.ptr, x.ptr);
    }
    if x.contiguous() {
        return (x.ptr, x.ptr + x.numel() as u64 * esize);
    }
    let last: i64 = x.sizes.iter().zip(x.strides).map(|(&n, &st)| (n - 1) * st).sum();
    (x.ptr, x.ptr + (last as u64 + 1) * esize)
}

/// `sparsek::bsr_mm_out(values, crow, col, rows, cols, b, alpha, beta, out)`: writes `out` (no output).
///
/// # Safety
/// As [`linear`], with the operator's 9 arguments.
unsafe fn bsr_mm_out(t: &Torch, stack: *mut u64) -> Result<Option<Handle>, Stop> {
    // SAFETY: the caller's contract.
    let arg = |i: usize| unsafe { *stack.add(i) };
    // SAFETY: tensor arguments are live handles.
    let (values, crow, col, b, out) = unsafe {
        (
            read(t, arg(0) as Handle)?,
            read(t, arg(1) as Handle)?,
            read(t, arg(2) as Handle)?,
            read(t, arg(5) as Handle)?,
            read(t, arg(8) as Handle)?,
        )
    };
    let (rows, cols) = (arg(3) as i64, arg(4) as i64);
    let (alpha, beta) = (f64::from_bits(arg(6)), f64::from_bits(arg(7)));
    let bs = check_mm(t, &values, &crow, &col, rows, cols, &b, out.dtype)?;
    let n = b.sizes[1];
    if out.sizes != [rows, n] {
        return Err(value(format!("sparsek: out has shape {}; the product is {rows}x{n}", out.shape())));
    }
    if !out.same_device(&b) {
        return Err(value(format!("sparsek: out is on {}, the operands on {}", out.device(t), b.device(t))));
    }
    let (o0, o1) = extent(t, &out);
    for (name, x) in [("the BSR values", &values), ("crow_indices", &crow), ("col_indices", &col), ("b", &b)] {
        let (e0, e1) = extent(t, x);
        if o0 < o1 && e0 < e1 && e0 < o1 && o0 < e1 {
            return Err(value(format!("sparsek: out overlaps {name}: the output must not alias an input")));
        }
    }
    let bd = mm_operand(t, &values, &crow, &col, &b)?;
    let oal = align(t, &out);
    let c = dense(out.ptr, rows, n, out.strides[0], out.strides[1], oal, t.dtypes.size(out.dtype) as i64, false)
        .ok_or(Stop::Delegate)?;
    let a = BsrOperand { values: &values, crow: &crow, col: &col, rows, cols, bs };
    run(t, &Call::mm(t, a, bd, n, c, out.dtype, alpha, beta))?;
    Ok(None)
}

/// Frees the stack's inputs: the handles at `tensors` and the present optional tensor at `opt_tensor`, the heap
/// value of the present optional at `opt_plain`.
///
/// # Safety
/// The stack holds the inputs, owned and not yet freed.
unsafe fn free_inputs(
    t: &Torch,
    stack: *mut u64,
    tensors: &[usize],
    opt_tensor: Option<usize>,
    opt_plain: Option<usize>,
) {
    // SAFETY: the caller's contract.
    unsafe {
        for &i in tensors {
            delete(t, *stack.add(i) as Handle);
        }
        if let Some(i) = opt_tensor {
            let p = *stack.add(i) as *mut u64;
            if !p.is_null() {
                delete(t, *p as Handle);
                torch_abi::free_optional(t, p);
            }
        }
        if let Some(i) = opt_plain {
            let p = *stack.add(i) as *mut u64;
            if !p.is_null() {
                torch_abi::free_optional(t, p);
            }
        }
    }
}

/// How a boxed kernel finished; `Err` carries the exception to throw once every Rust value is dropped.
fn finish(
    t: &Torch,
    stack: *mut u64,
    outcome: std::thread::Result<Result<Option<Handle>, Stop>>,
    twin: &std::ffi::CStr,
    inputs: (&[usize], Option<usize>, Option<usize>),
    has_output: bool,
) -> Result<(), (Kind, String)> {
    let stop = match outcome {
        Ok(Ok(out)) => {
            FINISHED.fetch_add(1, Ordering::Relaxed);
            // SAFETY: the inputs are owned by the stack and not used again; the output (if any) goes to slot 0.
            unsafe {
                free_inputs(t, stack, inputs.0, inputs.1, inputs.2);
                if let Some(out) = out {
                    *stack = out as u64;
                }
            }
            return Ok(());
        }
        Ok(Err(s)) => s,
        Err(_) => Stop::Raise {
            kind: Kind::Runtime,
            msg: "sparsek: internal error (a panic) in a native operator; set SPARSEK_NATIVE_OPS=0 to use the \
                  Python implementation, and please report it"
                .into(),
            type_error: false,
        },
    };
    match stop {
        Stop::Raise { kind, msg, type_error } => {
            // SAFETY: as above.
            unsafe { free_inputs(t, stack, inputs.0, inputs.1, inputs.2) };
            if type_error {
                TYPE_ERROR.with(|e| *e.borrow_mut() = Some(msg.clone()));
            }
            Err((kind, msg))
        }
        Stop::Delegate => {
            HANDED_OVER.fetch_add(1, Ordering::Relaxed);
            STASHED.with(|s| s.borrow_mut().take());
            // The twin hands an exception back through `stash_error` and returns a placeholder (so that libtorch
            // does not log it as a failed shim call).
            let was = DELEGATING.with(|d| d.replace(true));
            // SAFETY: the stack is handed over as it came (the twin has the same schema); the call consumes the
            // inputs and leaves the output in slot 0.
            let called = torch_abi::ok(unsafe { (t.call_dispatcher)(twin.as_ptr(), c"".as_ptr(), stack) });
            DELEGATING.with(|d| d.set(was));
            match STASHED.with(|s| s.borrow_mut().take()) {
                Some((kind, msg, type_error)) => {
                    if called && has_output {
                        // SAFETY: the placeholder output, owned by the stack.
                        delete(t, unsafe { *stack } as Handle);
                    }
                    if type_error {
                        TYPE_ERROR.with(|e| *e.borrow_mut() = Some(msg.clone()));
                    }
                    Err((kind, msg))
                }
                None if called => Ok(()),
                None => Err((Kind::Runtime, format!("sparsek: {} failed", twin.to_string_lossy()))),
            }
        }
    }
}

/// The boxed kernels torch calls. Each is two functions: `$body`, an `extern "C"` function that does all the work and
/// drops every Rust value before it returns what is left to throw ([`torch_abi::Pending`]), and `$name`, the
/// `extern "C-unwind"` entry that only calls `$body` and then [`torch_abi::throw`]. The C++ exception thus unwinds
/// through two Rust frames that have no landing pad and so no personality routine: libstdc++'s unwinder (libgcc_s)
/// never calls into this extension's own unwinder, which a zig-linked (manylinux) build carries statically and
/// which cannot read libgcc_s's unwind context (calling it crashed CI's wheel).
macro_rules! boxed_kernel {
    ($name:ident, $body:ident, $run:ident, $twin:literal, $inputs:expr, $has_output:expr) => {
        #[inline(never)] // (inlined, its landing pads would give the entry a personality routine)
        extern "C" fn $body(stack: *mut u64) -> torch_abi::Pending {
            let Some(t) = torch() else { return torch_abi::Pending::NONE };
            // SAFETY: torch calls the kernel with the operator's arguments on the stack.
            let r = catch_unwind(AssertUnwindSafe(|| unsafe { $run(t, stack) }));
            match finish(t, stack, r, $twin, $inputs, $has_output) {
                Ok(()) => torch_abi::Pending::NONE,
                Err((kind, msg)) => torch_abi::Pending::new(kind, msg),
            }
        }

        #[inline(never)]
        unsafe extern "C-unwind" fn $name(stack: *mut u64, _args: u64, _outs: u64) {
            let pending = $body(stack);
            if pending.is_some() {
                // SAFETY: a boxed kernel's frame that holds nothing to drop, called by torch's dispatcher.
                unsafe { torch_abi::throw(pending) }
            }
        }
    };
}

boxed_kernel!(linear_kernel, linear_body, linear, c"sparsek::_linear_py", (&[0, 1, 2, 3], Some(5), None), true);
boxed_kernel!(bsr_mm_kernel, bsr_mm_body, bsr_mm, c"sparsek::_bsr_mm_py", (&[0, 1, 2, 5], None, Some(7)), true);
boxed_kernel!(
    bsr_mm_out_kernel,
    bsr_mm_out_body,
    bsr_mm_out,
    c"sparsek::_bsr_mm_out_py",
    (&[0, 1, 2, 5, 8], None, None),
    false
);

/// Registers the native CPU and CUDA kernels of `sparsek::linear`, `sparsek::bsr_mm` and `sparsek::bsr_mm_out` (their
/// schemas and the twins `sparsek::_linear_py`, `_bsr_mm_py`, `_bsr_mm_out_py` must be defined already). `lib_dir`:
/// torch's `lib` directory; `hide`: symbols to treat as missing (tests). Returns the missing symbols (nothing
/// registered) or an empty list (registered).
#[pyfunction]
#[pyo3(signature = (lib_dir, hide=Vec::new()))]
pub fn register_native_ops(lib_dir: &str, hide: Vec<String>) -> PyResult<Vec<String>> {
    let t = match Torch::load(lib_dir, &hide) {
        Ok(t) => t,
        Err(missing) => return Ok(missing),
    };
    let kernels: [(&std::ffi::CStr, torch_abi::BoxedKernel); 3] =
        [(c"linear", linear_kernel), (c"bsr_mm", bsr_mm_kernel), (c"bsr_mm_out", bsr_mm_out_kernel)];
    for key in [c"CPU", c"CUDA"] {
        t.register(c"sparsek", key, &kernels).map_err(pyo3::exceptions::PyRuntimeError::new_err)?;
    }
    Ok(Vec::new())
}

/// Records a structure that `_ops._ensure_checked` checked (or pinned for a capture: `captured`) under its key,
/// so that the native kernels launch with it. Private.
#[pyfunction]
pub fn remember_checked(
    key: CheckedKey,
    structure: Py<CheckedStructure>,
    schedule: Option<Py<RowSchedule>>,
    captured: bool,
) {
    let mut g = CHECKED.lock().unwrap_or_else(PoisonError::into_inner);
    g.get_or_insert_with(HashMap::new).insert(key, Checked { structure, schedule, captured });
}

/// Forgets a structure `_ops` dropped (its tensors may be freed and their addresses reused). Private.
#[pyfunction]
pub fn forget_checked(key: CheckedKey) {
    let removed = CHECKED.lock().unwrap_or_else(PoisonError::into_inner).as_mut().and_then(|m| m.remove(&key));
    drop(removed);
}

/// Benchmarks only: with `true`, the native kernels check, allocate and look their structure up as always but
/// leave the product out (the output stays uninitialised), so that the host cost of the call path can be timed
/// apart from the CPU backend's arithmetic. Private.
#[pyfunction]
pub fn set_native_dry_run(enabled: bool) {
    DRY_RUN.store(enabled, Ordering::Relaxed);
}

/// `(finished, handed over)`: calls the native kernels finished themselves and calls they handed to the Python
/// kernels, since the process started (tests, diagnostics). Private.
#[pyfunction]
pub fn native_counts() -> (u64, u64) {
    (FINISHED.load(Ordering::Relaxed), HANDED_OVER.load(Ordering::Relaxed))
}

/// Whether the native structure cache holds `key` (tests). Private.
#[pyfunction]
pub fn native_checked_has(key: CheckedKey) -> bool {
    CHECKED.lock().unwrap_or_else(PoisonError::into_inner).as_ref().is_some_and(|m| m.contains_key(&key))
}

/// Entries of the native structure cache (tests).
#[pyfunction]
pub fn native_checked_len() -> usize {
    CHECKED.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map_or(0, HashMap::len)
}

/// Stashes the exception the Python twin raised (its class name decides the kind) for the native kernel of this
/// thread that called it, if one did (returns whether: the twin then returns a placeholder instead of raising).
/// Private.
#[pyfunction]
pub fn stash_error(class: &str, msg: String) -> bool {
    if !DELEGATING.with(|d| d.get()) {
        return false;
    }
    let (kind, type_error) = match class {
        "ValueError" => (Kind::Value, false),
        "TypeError" => (Kind::Runtime, true),
        "MemoryError" => (Kind::Memory, false),
        _ => (Kind::Runtime, false),
    };
    STASHED.with(|s| *s.borrow_mut() = Some((kind, msg, type_error)));
    true
}

/// The message of the last `TypeError` a native kernel of this thread raised as `RuntimeError` (cleared). Private:
/// the Python wrappers raise `TypeError` for a `RuntimeError` with this message.
#[pyfunction]
pub fn take_type_error() -> Option<String> {
    TYPE_ERROR.with(|e| e.borrow_mut().take())
}

/// Adds this module's functions to `sparsek._native`.
pub fn add_functions(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(register_native_ops, m)?)?;
    m.add_function(wrap_pyfunction!(remember_checked, m)?)?;
    m.add_function(wrap_pyfunction!(forget_checked, m)?)?;
    m.add_function(wrap_pyfunction!(native_checked_len, m)?)?;
    m.add_function(wrap_pyfunction!(native_checked_has, m)?)?;
    m.add_function(wrap_pyfunction!(native_counts, m)?)?;
    m.add_function(wrap_pyfunction!(set_native_dry_run, m)?)?;
    m.add_function(wrap_pyfunction!(stash_error, m)?)?;
    m.add_function(wrap_pyfunction!(take_type_error, m)?)?;
    Ok(())
}
