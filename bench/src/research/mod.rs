//! Research tools that issue work needed to judge the kernels, kept apart from the benchmark's own method: the
//! **read floor** ([`floor`]: a kernel that only moves a case's bytes, what no product can beat when timed the same
//! way) and **queued timing** ([`queued`]: device time per launch with the host's launch gap taken out). The decode
//! grid reports both beside its contenders.

pub mod floor;
pub mod queued;
