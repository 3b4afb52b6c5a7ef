//! Variable-length batches on every GPU path, by the definition itself: sequence `b` of a
//! [`crate::Varlen`] problem is the problem of that sequence alone
//! ([`Problem::sequence_problem`]), run by the path's own plan on views of the packed tensors that
//! start at the sequence's rows. So its rows are, by construction, the bits it gets alone (D2
//! generalised), on every entry point, and a path needs no code of its own for it.
//!
//! [`Sequences`] wraps a path; a problem that is not variable-length goes through untouched. The
//! `Reject` scan reads the packed tensors as one rectangular problem ([`Problem::packed`]): every
//! packed row, as the CPU's scan does. Each sequence then runs with scratch of its own (a region
//! of each buffer, after the scan's), never reusing another's, and its key length at its own
//! place in the key-length buffer ([`key_lengths`]).
//!
//! The cost: one launch set per sequence with query rows, one after another on the stream. A
//! batch of many short sequences is bound by launch overhead; one launch over all sequences is
//! future kernel work.

use super::launch::Launch;
use super::path::{DevTensor, GpuPath, Io, Step};
use crate::dtype::DType;
use crate::error::Result;
use crate::problem::Problem;
use crate::tensor::{Operand, Operands};

/// Scratch regions start at multiples of this many bytes (any kernel's widest access is 16).
const ALIGN: usize = 256;

/// The key lengths the entry points upload for `p` (one `int` each): without varlen, one per
/// batch element (`kv_len` where the problem gives none); with it, the packed key length (for the
/// packed scan) and then each sequence's.
pub(crate) fn key_lengths(p: &Problem) -> Vec<i32> {
    match p.varlen() {
        None => (0..p.shape().batch)
            .map(|b| p.kv_len_of(b) as i32)
            .collect(),
        Some(_) => std::iter::once(p.shape().kv_len)
            .chain((0..p.sequences()).map(|b| p.sequence(b).key_len))
            .map(|l| l as i32)
            .collect(),
    }
}

/// A path that also takes variable-length problems (module docs).
pub(crate) struct Sequences<'a, P>(pub &'a P);

/// The plan of a call through [`Sequences`].
pub(crate) enum Plan<Pl> {
    /// Not a variable-length problem: the path's own plan.
    Whole(Pl),
    /// A variable-length problem.
    Packed(Box<Packed<Pl>>),
}

pub(crate) struct Packed<Pl> {
    elem: usize,
    /// The packed tensors as one problem, and its plan (for the scan).
    scan: Problem,
    scan_plan: Pl,
    /// The sequences with query rows, in order.
    parts: Vec<Part<Pl>>,
}

struct Part<Pl> {
    /// Its index among the problem's sequences.
    index: usize,
    problem: Problem,
    plan: Pl,
    /// Its first packed query row, and the packed key row its keys start at (0 for a sequence
    /// of no keys, whose view must still lie inside K: no key of it is read).
    q_row: usize,
    k_row: usize,
}

/// A row view: `op` from its row `row` on.
fn op_from(op: Operand, row: usize) -> Operand {
    Operand {
        len: op.len,
        layout: op.layout.with_offset(op.layout.row(0, 0, row)),
    }
}

/// A device tensor from its row `row` on (`elem` bytes per element).
fn dev_from(t: DevTensor, row: usize, elem: usize) -> DevTensor {
    DevTensor {
        addr: t.addr + (row as u64) * (t.ss as u64) * elem as u64,
        ..t
    }
}

impl<Pl> Packed<Pl> {
    /// Bytes of each buffer, and where each part's region of each buffer starts: the scan's
    /// region first (when `check`), then the parts' in order.
    fn regions<P: GpuPath<Plan = Pl>>(
        &self,
        path: &P,
        check: bool,
    ) -> (Vec<usize>, Vec<Vec<usize>>) {
        let up = |n: usize| n.div_ceil(ALIGN) * ALIGN;
        let mut total: Vec<usize> = if check {
            path.scratch(&self.scan, &self.scan_plan, true)
                .into_iter()
                .map(up)
                .collect()
        } else {
            Vec::new()
        };
        let mut starts = Vec::with_capacity(self.parts.len());
        for part in &self.parts {
            let sizes = path.scratch(&part.problem, &part.plan, false);
            if total.len() < sizes.len() {
                total.resize(sizes.len(), 0);
            }
            starts.push(total.clone());
            for (t, n) in total.iter_mut().zip(sizes) {
                *t += up(n);
            }
        }
        (total, starts)
    }
}

impl<P: GpuPath> GpuPath for Sequences<'_, P> {
    type Plan = Plan<P::Plan>;
    const PATH: crate::Path = P::PATH;

    fn plan(&self, p: &Problem, dtype: DType, ops: &Operands) -> Result<Self::Plan> {
        if p.varlen().is_none() {
            return self.0.plan(p, dtype, ops).map(Plan::Whole);
        }
        let scan = p.packed();
        let scan_plan = self.0.plan(&scan, dtype, ops)?;
        let mut parts = Vec::new();
        for index in 0..p.sequences() {
            let seq = p.sequence(index);
            if seq.q_len == 0 {
                continue;
            }
            let k_row = if seq.key_len == 0 { 0 } else { seq.k_start };
            let sub_ops = Operands {
                q: op_from(ops.q, seq.q_start),
                k: op_from(ops.k, k_row),
                v: op_from(ops.v, k_row),
                mask: None,
                out: op_from(ops.out, seq.q_start),
            };
            let problem = p.sequence_problem(index);
            let plan = self.0.plan(&problem, dtype, &sub_ops)?;
            parts.push(Part {
                index,
                problem,
                plan,
                q_row: seq.q_start,
                k_row,
            });
        }
        Ok(Plan::Packed(Box::new(Packed {
            elem: dtype.size(),
            scan,
            scan_plan,
            parts,
        })))
    }

    /// A problem without varlen as the path decides; a varlen batch never (its sequences run on
    /// the gathered rows).
    fn reads_pages(&self, p: &Problem, plan: &Self::Plan) -> bool {
        match plan {
            Plan::Whole(pl) => self.0.reads_pages(p, pl),
            Plan::Packed(_) => false,
        }
    }

    fn scratch(&self, p: &Problem, plan: &Self::Plan, check: bool) -> Vec<usize> {
        match plan {
            Plan::Whole(pl) => self.0.scratch(p, pl, check),
            Plan::Packed(pk) => pk.regions(self.0, check).0,
        }
    }

    /// A packed batch's buffer holds every part's region (and the scan's): it needs no zeroing
    /// only where no region of it does (the alignment gaps between regions are never read). A
    /// buffer past the end of some region's list counts as not written there, as it does for
    /// `CallMemory`.
    fn written_first(&self, p: &Problem, plan: &Self::Plan, check: bool) -> Vec<bool> {
        match plan {
            Plan::Whole(pl) => self.0.written_first(p, pl, check),
            Plan::Packed(pk) => {
                let scan = check.then(|| self.0.written_first(&pk.scan, &pk.scan_plan, true));
                let parts = pk
                    .parts
                    .iter()
                    .map(|part| self.0.written_first(&part.problem, &part.plan, false));
                let all: Vec<Vec<bool>> = scan.into_iter().chain(parts).collect();
                let n = all.iter().map(Vec::len).max().unwrap_or(0);
                (0..n)
                    .map(|i| all.iter().all(|w| w.get(i).copied().unwrap_or(false)))
                    .collect()
            }
        }
    }

    fn launches(
        &self,
        p: &Problem,
        plan: &Self::Plan,
        io: &Io,
        scratch: &[u64],
        step: Step,
    ) -> Result<Vec<Launch>> {
        let pk = match plan {
            Plan::Whole(pl) => return self.0.launches(p, pl, io, scratch, step),
            Plan::Packed(pk) => pk,
        };
        if step == Step::Check {
            return self.0.launches(&pk.scan, &pk.scan_plan, io, scratch, step);
        }
        // Compute: the regions are laid out as for a call with the scan (a call without it has
        // asked for the smaller sizes; then the scan's region is absent).
        let checked = matches!(step, Step::Compute { checked: true });
        let (_, starts) = pk.regions(self.0, checked);
        let mut out = Vec::new();
        for (part, start) in pk.parts.iter().zip(starts) {
            let sub_io = Io {
                q: dev_from(io.q, part.q_row, pk.elem),
                k: dev_from(io.k, part.k_row, pk.elem),
                v: dev_from(io.v, part.k_row, pk.elem),
                out: dev_from(io.out, part.q_row, pk.elem),
                mask: 0,
                kv_lens: io.kv_lens + 4 * (1 + part.index as u64),
                // The log-sum-exp's rows follow the query rows ([Hq, total]); none asked, none.
                lse: match io.lse.addr {
                    0 => io.lse,
                    _ => dev_from(io.lse, part.q_row, 4),
                },
                pages: None,
            };
            let sub_scratch: Vec<u64> = scratch
                .iter()
                .zip(start)
                .map(|(&base, at)| base + at as u64)
                .collect();
            // Each sequence's own work, preparation included: the scan's preparation was of the
            // packed problem, in its own region.
            let step = Step::Compute { checked: false };
            out.extend(
                self.0
                    .launches(&part.problem, &part.plan, &sub_io, &sub_scratch, step)?,
            );
        }
        Ok(out)
    }
}
