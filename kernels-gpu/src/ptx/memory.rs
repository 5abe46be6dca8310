//! Vector loads and stores: 16 bytes to or from global and shared memory, 8 bytes (two f32) to global memory
//! (PTX ISA §9.7.9.8 `ld`, §9.7.9.10 `st`, `.v4.u32` and `.v2.f32`).

use core::arch::asm;

/// `ld.global.v4.u32`: 16 bytes from global memory.
///
/// # Safety
/// `ptr` is a 16-byte aligned global address of 16 readable bytes.
#[inline(always)]
pub unsafe fn ld_global_v4(ptr: *const u32) -> [u32; 4] {
    let v: [u32; 4];
    // SAFETY: the caller guarantees `ptr` is valid and aligned.
    unsafe {
        let (a, b, c, d): (u32, u32, u32, u32);
        asm!("ld.global.v4.u32 {{{0}, {1}, {2}, {3}}}, [{4}];", out(reg32) a, out(reg32) b, out(reg32) c,
             out(reg32) d, in(reg64) ptr, options(readonly, nostack));
        v = [a, b, c, d];
    }
    v
}

/// `st.global.v4.u32`: 16 bytes to global memory.
///
/// # Safety
/// `ptr` is a 16-byte aligned global address of 16 writable bytes.
#[inline(always)]
pub unsafe fn st_global_v4(ptr: *mut u32, v: [u32; 4]) {
    // SAFETY: the caller guarantees `ptr` is valid and aligned.
    unsafe {
        asm!("st.global.v4.u32 [{0}], {{{1}, {2}, {3}, {4}}};", in(reg64) ptr, in(reg32) v[0], in(reg32) v[1],
             in(reg32) v[2], in(reg32) v[3], options(nostack))
    };
}

/// `ld.shared.v4.u32`: 16 bytes from shared memory.
///
/// # Safety
/// `addr` is a 16-byte aligned shared address inside the CTA's shared memory.
#[inline(always)]
pub unsafe fn ld_shared_v4(addr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: the caller guarantees `addr` is valid and aligned.
    unsafe {
        asm!("ld.shared.v4.u32 {{{0}, {1}, {2}, {3}}}, [{4}];", out(reg32) a, out(reg32) b, out(reg32) c,
             out(reg32) d, in(reg32) addr, options(readonly, nostack))
    };
    [a, b, c, d]
}

/// `st.shared.v4.u32`: 16 bytes to shared memory.
///
/// # Safety
/// `addr` is a 16-byte aligned shared address inside the CTA's shared memory.
#[inline(always)]
pub unsafe fn st_shared_v4(addr: u32, v: [u32; 4]) {
    // SAFETY: the caller guarantees `addr` is valid and aligned.
    unsafe {
        asm!("st.shared.v4.u32 [{0}], {{{1}, {2}, {3}, {4}}};", in(reg32) addr, in(reg32) v[0], in(reg32) v[1],
             in(reg32) v[2], in(reg32) v[3], options(nostack))
    };
}

/// `st.shared.v2.u32`: 8 bytes to shared memory.
///
/// # Safety
/// `addr` is an 8-byte aligned shared address inside the CTA's shared memory.
#[inline(always)]
pub unsafe fn st_shared_v2(addr: u32, v0: u32, v1: u32) {
    // SAFETY: the caller guarantees `addr` is valid and aligned.
    unsafe {
        asm!("st.shared.v2.u32 [{0}], {{{1}, {2}}};", in(reg32) addr, in(reg32) v0, in(reg32) v1, options(nostack))
    };
}

/// `st.shared.u32`: 4 bytes to shared memory.
///
/// # Safety
/// `addr` is a 4-byte aligned shared address inside the CTA's shared memory.
#[inline(always)]
pub unsafe fn st_shared_u32(addr: u32, v: u32) {
    // SAFETY: the caller guarantees `addr` is valid and aligned.
    unsafe { asm!("st.shared.u32 [{0}], {1};", in(reg32) addr, in(reg32) v, options(nostack)) };
}

/// `st.global.v2.f32`: 8 bytes (two f32) to global memory.
///
/// # Safety
/// `ptr` is an 8-byte aligned global address of 8 writable bytes.
#[inline(always)]
pub unsafe fn st_global_v2_f32(ptr: *mut f32, v0: f32, v1: f32) {
    // SAFETY: the caller guarantees `ptr` is valid and aligned.
    unsafe {
        asm!("st.global.v2.f32 [{0}], {{{1}, {2}}};", in(reg64) ptr, in(reg32) v0, in(reg32) v1, options(nostack))
    };
}

// ---------------------------------------------------------------------------------------------------------------
// Scalar global loads and stores (PTX ISA §9.7.9.8 ld, §9.7.9.10 st, .global state space)
//
// The kernels get their device addresses as integers in a `.param` struct (layout::BsrSpmmParams), so LLVM cannot
// infer that they point to global memory and would emit generic `ld`/`st` (measured slower on an H100:
// docs/perf-notes.md). These wrappers name the state space; `cvta.to.global` (a no-op that ptxas folds) turns the
// generic address into a global one as the ISA requires.
// ---------------------------------------------------------------------------------------------------------------

/// Defines a scalar `ld.global` wrapper.
macro_rules! ld_global {
    ($(#[$doc:meta])* $name:ident, $t:ty, $ptx:literal, $class:ident) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `ptr` is a naturally aligned global address of a readable element.
        #[inline(always)]
        pub unsafe fn $name(ptr: *const $t) -> $t {
            let v: $t;
            // SAFETY: the caller guarantees `ptr` is valid and aligned; the asm only reads it.
            unsafe {
                asm!(
                    concat!("{{ .reg .u64 g; cvta.to.global.u64 g, {p}; ", $ptx, " {v}, [g]; }}"),
                    p = in(reg64) ptr,
                    v = out($class) v,
                    options(pure, readonly, nostack)
                )
            };
            v
        }
    };
}

/// Defines a scalar `st.global` wrapper.
macro_rules! st_global {
    ($(#[$doc:meta])* $name:ident, $t:ty, $ptx:literal, $class:ident) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `ptr` is a naturally aligned global address of a writable element.
        #[inline(always)]
        pub unsafe fn $name(ptr: *mut $t, v: $t) {
            // SAFETY: the caller guarantees `ptr` is valid and aligned.
            unsafe {
                asm!(
                    concat!("{{ .reg .u64 g; cvta.to.global.u64 g, {p}; ", $ptx, " [g], {v}; }}"),
                    p = in(reg64) ptr,
                    v = in($class) v,
                    options(nostack)
                )
            };
        }
    };
}

ld_global!(
    /// `ld.global.u32`: one u32 (the BSR index arrays).
    ld_global_u32, u32, "ld.global.u32", reg32
);
ld_global!(
    /// `ld.global.u64`: one u64 (64-bit BSR index arrays, PyTorch's int64).
    ld_global_u64, u64, "ld.global.u64", reg64
);
ld_global!(
    /// `ld.global.f32`: one f32 (C, for beta != 0).
    ld_global_f32, f32, "ld.global.f32", reg32
);
ld_global!(
    /// `ld.global.u16`: one f16, as bits (C, for beta != 0).
    ld_global_u16, u16, "ld.global.u16", reg16
);
st_global!(
    /// `st.global.f32`: one f32.
    st_global_f32, f32, "st.global.f32", reg32
);
st_global!(
    /// `st.global.u32`: 32 bits (two packed f16).
    st_global_u32, u32, "st.global.u32", reg32
);
st_global!(
    /// `st.global.u16`: one f16, as bits.
    st_global_u16, u16, "st.global.u16", reg16
);

address_asm! {
    /// `atom.global.min.u64`: `*ptr = min(*ptr, v)` atomically (the structure check's first violation).
    ///
    /// # Safety
    /// `ptr` is an 8-byte aligned global address of a writable u64.
    atom_global_min_u64(ptr: *mut u64 = reg64, v: u64 = reg64):
        "{{ .reg .u64 g; .reg .u64 old; cvta.to.global.u64 g, {ptr}; atom.global.min.u64 old, [g], {v}; }}",
        [nostack];
}

// ---------------------------------------------------------------------------------------------------------------
// Cross-CTA hand-over of partial sums (the narrow kernel's split rows, kernels-gpu/src/sm80/bsr.rs): every thread
// stores its partial tile, a barrier, then one thread per CTA fences at GPU scope and counts the CTA in with a
// relaxed atomic add; the CTA that counts last fences again and reads the others' tiles from L2 (`.cg`: the
// lines may sit stale in this SM's L1). The pattern of CUTLASS's split-K semaphore (PTX ISA §8 memory
// consistency model: a fence.acq_rel at gpu scope after the CTA barrier makes the CTA's stores visible to any
// thread that observes the atomic and then fences).
// ---------------------------------------------------------------------------------------------------------------

ordering_asm! {
    /// `fence.acq_rel.gpu`: orders this thread's (and, through a preceding CTA barrier, its CTA's) memory accesses
    /// before and after it at GPU scope (sm_70+).
    fence_acq_rel_gpu: "fence.acq_rel.gpu;";
}

address_asm! {
    /// `atom.global.add.u32`: `*ptr += v` atomically (relaxed, GPU scope); returns the old value.
    ///
    /// # Safety
    /// `ptr` is a 4-byte aligned global address of a writable u32.
    atom_global_add_u32(ptr: *mut u32 = reg64, v: u32 = reg32) -> old: u32 = reg32:
        "{{ .reg .u64 g; cvta.to.global.u64 g, {ptr}; atom.global.add.u32 {old}, [g], {v}; }}",
        [nostack];
    /// `ld.relaxed.gpu.global.u32`: a u32 that other CTAs update atomically during this launch, read from L2 (a
    /// strong load: never a stale L1 line). Polling it and then [`fence_acq_rel_gpu`] once it shows what another
    /// CTA published with a release pattern (a fence at GPU scope before a relaxed atomic) is an acquire pattern:
    /// this thread's loads after the fence see what was written before that CTA's fence. The value is used only
    /// when read, so the load's round trip runs under the work in between. Not `pure`: a fresh read each time.
    ///
    /// # Safety
    /// `ptr` is a 4-byte aligned global address of a readable u32.
    ld_relaxed_gpu_u32(ptr: *const u32 = reg64) -> v: u32 = reg32:
        "{{ .reg .u64 g; cvta.to.global.u64 g, {ptr}; ld.relaxed.gpu.global.u32 {v}, [g]; }}",
        [readonly, nostack];
}

// ---------------------------------------------------------------------------------------------------------------
// Read-only and streaming loads (PTX ISA §9.7.9.8 ld: `.nc`, `.L1::no_allocate`, `.L2::cache_hint`; §9.7.9.17
// createpolicy). The decode kernels read each weight byte once: those loads skip L1 and are marked evict-first
// in L2, so they do not push out B, the indices and C, which other CTAs read again.
// ---------------------------------------------------------------------------------------------------------------

/// `createpolicy.fractional.L2::evict_first.b64 p, 1.0`: an L2 cache policy marking every line a load with
/// `.L2::cache_hint` brings in as first to evict (sm_80+).
#[inline(always)]
pub fn l2_evict_first_policy() -> u64 {
    let p: u64;
    // SAFETY: creates an opaque policy value in a register; no memory access.
    unsafe {
        asm!("createpolicy.fractional.L2::evict_first.b64 {0}, 1.0;", out(reg64) p, options(pure, nomem, nostack))
    };
    p
}

/// Defines a 16-byte global load through the generic-to-global conversion (`cvta.to.global`): `name(extra
/// 64-bit operands): "<instruction>", "<operands after the address>", [asm options]`.
macro_rules! ld_global_v4_cvta {
    ($($(#[$doc:meta])* $name:ident($($arg:ident),*): $op:literal, $tail:literal, [$($opt:ident),*];)*) => {$(
        $(#[$doc])*
        #[inline(always)]
        pub unsafe fn $name(ptr: *const u32 $(, $arg: u64)*) -> [u32; 4] {
            let (a, b, c, d): (u32, u32, u32, u32);
            // SAFETY: the caller guarantees `ptr` is valid and aligned (and, for the non-coherent loads, read-only
            // for the kernel's lifetime).
            unsafe {
                asm!(
                    concat!(
                        "{{ .reg .u64 g; cvta.to.global.u64 g, {p}; ",
                        $op,
                        " {{{a}, {b}, {c}, {d}}}, [g]",
                        $tail,
                        "; }}"
                    ),
                    p = in(reg64) ptr,
                    $($arg = in(reg64) $arg,)*
                    a = out(reg32) a,
                    b = out(reg32) b,
                    c = out(reg32) c,
                    d = out(reg32) d,
                    options($($opt),*)
                )
            };
            [a, b, c, d]
        }
    )*};
}

ld_global_v4_cvta! {
    /// `ld.global.cg.v4.u32`: 16 bytes from L2, not cached in L1 (data other CTAs wrote during this launch). Not
    /// `pure`: it must stay after the fence that acquires them.
    ///
    /// # Safety
    /// `ptr` is a 16-byte aligned global address of 16 readable bytes.
    ld_global_cg_v4(): "ld.global.cg.v4.u32", "", [readonly, nostack];
    /// `ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32`: 16 read-only bytes that bypass L1 and are cached in
    /// L2 under `policy` (from [`l2_evict_first_policy`]): a streamed weight.
    ///
    /// # Safety
    /// `ptr` is a 16-byte aligned global address of 16 bytes that nothing writes while the kernel runs.
    ld_global_stream_v4(policy): "ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32", ", {policy}",
        [pure, readonly, nostack];
    /// `ld.global.nc.v4.u32`: 16 read-only bytes through the non-coherent (texture) path, cached in L1.
    ///
    /// # Safety
    /// `ptr` is a 16-byte aligned global address of 16 bytes that nothing writes while the kernel runs.
    ld_global_nc_v4(): "ld.global.nc.v4.u32", "", [pure, readonly, nostack];
}

ld_global!(
    /// `ld.global.nc.u16`: one read-only 16-bit element (nothing writes it while the kernel runs) through the
    /// non-coherent path, cached in L1.
    ld_global_nc_u16, u16, "ld.global.nc.u16", reg16
);
