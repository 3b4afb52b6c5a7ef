#!/usr/bin/env python3
"""SASS audit of the detattn kernels (docs/audit.md).

    python3 audit/sass_audit.py                      audit every audit/sass/<stem>.sass (+ .res.txt),
                                                     with kernels/cubin/<stem>.cubin for the parameter layout
    python3 audit/sass_audit.py --listing F.sass [--res F.res.txt] [--cubin F.cubin] [--rules R]
                                                     audit one listing (planted faults, a copy of a listing)
    options: --flow-insensitive (the coarser taint pass), --quiet (only FAIL/violation lines),
             --check-listings (first `kernels/build.py sass --check`: the listings match the cubins)

Checks, per kernel, the rules of its path in audit/rules.toml:
  opcode      every opcode in the path's allow-list; forbidden ones (MUFU, HMMA, ATOM*, RED, LDL/STL,
              CALL, FCHK, ...) named with the reason;
  budget      registers, shared memory, stack and local memory from `cuobjdump -res-usage`;
  taint-*     no branch, exit, barrier or memory address that depends on secret data (a taint pass over
              registers, uniform registers and predicates; sources are global loads not proven public
              and shared loads once any secret value was stored to shared memory).
Prints one OK/FAIL line per kernel per cubin and one VIOLATION line per finding (cubin, kernel, address,
listing line, instruction, rule, why). Exits 1 on any violation or when something cannot be audited.

Python 3.11+ standard library only (tomllib); `cuobjdump -elf` from the pinned toolchain venv is run on
the cubin to read the parameter layout (EIATTR_KPARAM_INFO / EIATTR_PARAM_CBANK).
"""

import argparse
import fnmatch
import os
import re
import subprocess
import sys
import tomllib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RULES = ROOT / "audit/rules.toml"
SASS_DIR = ROOT / "audit/sass"
CUBIN_DIR = ROOT / "kernels/cubin"
CUOBJDUMP = ROOT / ".venv-cuda/nvidia/cu13/bin/cuobjdump"

# ------------------------------------------------------------------------------------ opcode classes
# Control transfers and warp-level synchronisation: a tainted guard or a tainted register/predicate
# operand means the executed path (or the time spent waiting) depends on secret data.
# WARPGROUP (ARRIVE; DEPBAR.LE, the wait for a warpgroup's wgmma groups) is a wait like BAR.
CONTROL = {"BRA", "BRX", "BRXU", "JMP", "JMX", "JMXU", "EXIT", "KILL", "BREAK", "BSSY", "BSYNC", "RET",
           "CALL", "WARPSYNC", "BPT", "BAR", "NANOSLEEP", "YIELD", "RTT", "ACQBULK", "WARPGROUP"}
# Memory instructions: the address (registers inside [...]) and the guard must be public.
GLOBAL_LOADS = {"LDG", "LD", "ATOMG", "ATOM", "SULD", "TLD", "TEX", "TLD4", "TXD", "TXQ"}
SHARED_LOADS = {"LDS", "LDSM", "ATOMS"}
LOCAL_LOADS = {"LDL"}
STORES_GLOBAL = {"STG", "ST", "RED", "REDG", "SUST", "SURED", "UTMASTG", "UBLKRED"}
STORES_SHARED = {"STS", "STSM"}
STORES_LOCAL = {"STL"}
# Copies from global into shared memory (cp.async, TMA, bulk copy): shared gets secret data unless the
# global address is proven public (TMA/bulk: always assumed secret).
GLOBAL_TO_SHARED = {"LDGSTS", "UTMALDG", "UBLKCP", "UTMAPF"}
MEMORY = (GLOBAL_LOADS | SHARED_LOADS | LOCAL_LOADS | STORES_GLOBAL | STORES_SHARED | STORES_LOCAL
          | GLOBAL_TO_SHARED | {"LDC", "ULDC", "LDCU", "CCTL", "CCTLL", "ATOMS"})
NO_REG_DEST = (STORES_GLOBAL | STORES_SHARED | STORES_LOCAL | GLOBAL_TO_SHARED | CONTROL
               | {"MEMBAR", "FENCE", "DEPBAR", "LDGDEPBAR", "ERRBAR", "CCTL", "CCTLL", "NOP", "ARRIVES",
                  "UTMACCTL", "UTMACMDFLUSH"})
# mbarrier operations (sm_90): SYNCS.EXCH (init), SYNCS.ARRIVE.* (arrive, expect-tx), and
# `SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [addr], Rphase`, whose predicate says whether the phase has
# completed: a value of timing, never of data, unless the address, the phase or the arrivals and
# byte counts that complete it are. So a SYNCS's first operand is its destination (P0; RZ or URZ for
# the others), its value is the taint of its operands, and every operand must be public (rule
# taint-barrier): then a wait loop's branch on P0 is public, and a wait whose phase, barrier or
# expected bytes came from a secret fails.
SYNC_BARRIER = {"SYNCS"}
# Compare-like instructions write exactly two predicates (P0, PT) first; the rest are sources.
TWO_PRED_DEST = {"ISETP", "FSETP", "DSETP", "HSETP2", "PSETP", "PLOP3", "UISETP", "UPSETP", "UPLOP3"}
# Values that come from no data: special registers, constant bank (kernel parameters), clocks.
# LDCU is Blackwell's (sm_100, sm_120) load of the constant bank into a uniform register, where
# Hopper and earlier use ULDC.
UNTAINTED_SOURCES = {"S2R", "S2UR", "CS2R", "LDC", "ULDC", "LDCU"}
# Integer adders whose predicates right after the destination are carry outputs (IADD3 R1, P0, P1, ...;
# LEA R2, P0, ...; IMAD.WIDE.U32 R2, P0, ...); their carry inputs come last (IADD3.X ..., P0, !PT).
CARRY_OUT_OPS = {"IADD3", "UIADD3", "IADD", "UIADD", "LEA", "ULEA", "IMAD", "UIMAD", "IADD32I", "ISCADD"}
CONVERSIONS = {"F2F", "F2I", "I2F", "I2I", "F2IP", "I2FP", "FRND"}
DOUBLE_OPS = {"DADD", "DMUL", "DFMA", "DSETP", "DMNMX", "DSET", "DMMA"}
MMA_OPS = {"HMMA", "IMMA", "BMMA", "DMMA", "HGMMA", "IGMMA", "QGMMA", "BGMMA"}
# Warpgroup MMAs (sm_90a wgmma): `HGMMA.64xNx16.F32.BF16 Rd, Ra, gdesc[URb], Rc`. The accumulator
# Rd..Rd+N/2-1 (f32; N/4 for f16 accumulation) is written and, as Rc, read; A comes from four
# registers or, like B, from shared memory through a descriptor in uniform registers (gdesc[...]:
# an address operand, so the taint pass requires it public), and the result carries shared memory's
# taint.
GMMA_OPS = {"HGMMA", "IGMMA", "QGMMA", "BGMMA"}
GMMA_SHAPE_RE = re.compile(r"64x(\d+)x\d+")


def gmma_acc_regs(mods):
    """Accumulator registers per thread of a warpgroup MMA (64 x N, f32 or f16/s32 accumulators)."""
    n = next((int(m.group(1)) for m in map(GMMA_SHAPE_RE.fullmatch, mods) if m), None)
    if n is None:
        raise AuditError(f"warpgroup MMA without a 64xNxK shape: {'.'.join(mods)}")
    return n // 4 if "F16" in mods[1:2] else n // 2

REG_RE = re.compile(r"(?<![\w.])(?P<name>UR(?:\d+|Z)|R(?:\d+|Z)|UP(?:\d|T)|P(?:\d|T)|PR)(?P<suf>(?:\.[\w]+)*)")
CONST_RE = re.compile(r"c\[(0x[0-9a-f]+)\]\[([^\]]*)\]")
INSTR_RE = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
FUNC_RE = re.compile(r"^\s*Function\s*:\s*(\S+)")
ARCH_RE = re.compile(r"^\s*code for (sm_\d+\w*)")


class AuditError(Exception):
    """Something the audit cannot check (missing file, unparsable listing): reported, exit 1."""


# ------------------------------------------------------------------------------------------- parsing
@dataclass
class Operand:
    text: str
    neg: bool = False            # a predicate written !P0
    regs: list = field(default_factory=list)  # [(name, width)] registers/predicates read or written
    mem: bool = False            # [...] address operand (registers inside are address registers)
    const: tuple | None = None   # c[bank][offset]: (bank, offset, or None if register-indexed)
    is_pred: bool = False


@dataclass
class Instr:
    addr: int
    line: int
    text: str
    guard: tuple | None          # (negated, predicate name) or None
    opcode: str                  # full, with modifiers: ISETP.GE.AND
    base: str                    # ISETP
    mods: list
    ops: list                    # [Operand]

    def where(self):
        return f"/*{self.addr:04x}*/ line {self.line}"


@dataclass
class Kernel:
    name: str
    arch: str
    instrs: list


def split_operands(s):
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def reg_width(suffix):
    for part in suffix.split("."):
        if part == "64":
            return 2
        if part == "128":
            return 4
    return 1


def parse_operand(text):
    op = Operand(text=text)
    t = text.strip()
    if t.startswith("!"):
        op.neg = True
        t = t[1:]
    m = CONST_RE.search(t)
    if m:
        inner = m.group(2).strip()
        regs = [r.group("name") for r in REG_RE.finditer(inner)]
        imm = re.findall(r"(-?)(0x[0-9a-f]+)", inner)
        off = sum(int(v, 16) * (-1 if sgn else 1) for sgn, v in imm)
        if any(r not in ("RZ", "URZ") for r in regs):
            off = None  # c[0x0][R2+0x10]: a register-indexed constant load
            op.mem = True
            op.regs = [(r, 1) for r in regs]
        op.const = (int(m.group(1), 16), off)
        return op
    if "[" in t:
        op.mem = True
    for r in REG_RE.finditer(t):
        op.regs.append((r.group("name"), reg_width(r.group("suf"))))
    op.is_pred = len(op.regs) == 1 and not op.mem and re.fullmatch(r"U?P(\d|T)|PR", op.regs[0][0]) is not None
    return op


def parse_listing(text):
    """cuobjdump -sass text -> [Kernel]. Raises AuditError on a line that looks like an instruction
    but does not parse, so that a format change cannot silently hide code from the audit."""
    kernels, arch, cur = [], None, None
    for n, line in enumerate(text.splitlines(), 1):
        m = ARCH_RE.match(line)
        if m:
            arch = m.group(1)
            continue
        m = FUNC_RE.match(line)
        if m:
            cur = Kernel(m.group(1), arch or "?", [])
            kernels.append(cur)
            continue
        if "/*" not in line or re.match(r"^\s*/\* 0x[0-9a-f]+ \*/\s*$", line):
            continue
        m = INSTR_RE.match(line)
        if not m:
            if re.match(r"^\s*/\*[0-9a-f]{4,}\*/", line):
                raise AuditError(f"line {n}: cannot parse instruction: {line.strip()}")
            continue
        if cur is None:
            raise AuditError(f"line {n}: instruction outside a Function")
        addr, body = int(m.group(1), 16), m.group(2).strip()
        guard = None
        gm = re.match(r"^@(!?)(U?P(?:\d|T))\s+(.*)$", body)
        if gm:
            guard = (gm.group(1) == "!", gm.group(2))
            body = gm.group(3)
        parts = body.split(None, 1)
        opcode = parts[0]
        rest = parts[1] if len(parts) > 1 else ""
        # (RET.REL.NODEC R20 0x0 separates its last operand with a space: one operand, R20 still found)
        ops = [parse_operand(o) for o in split_operands(rest)]
        base, *mods = opcode.split(".")
        cur.instrs.append(Instr(addr, n, re.sub(r"\s+", " ", m.group(2).strip()) + " ;", guard, opcode,
                                base, mods, ops))
    return kernels


def parse_res(text):
    """cuobjdump -res-usage text -> {kernel: {REG: n, STACK: n, SHARED: n, LOCAL: n, ...}}"""
    out, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"^\s*Function\s+(\S+?):?\s*$", line)
        if m:
            cur = m.group(1)
            continue
        if cur and "REG:" in line:
            out[cur] = {k: int(v) for k, v in re.findall(r"([A-Z]+(?:\[\d+\])?):(\d+)", line)}
            cur = None
    return out


def param_layout(cubin):
    """{kernel: (param_base, [(ordinal, offset, size)])} from `cuobjdump -elf` of the cubin."""
    if not CUOBJDUMP.exists():
        raise AuditError(f"{CUOBJDUMP} missing: run `bash scripts/cuda-toolchain.sh` (or build.py)")
    p = subprocess.run([str(CUOBJDUMP), "-elf", str(cubin)], capture_output=True, text=True,
                       env={"PATH": f"{CUOBJDUMP.parent}:/usr/bin:/bin", "LC_ALL": "C"})
    if p.returncode != 0:
        raise AuditError(f"cuobjdump -elf {cubin}: {p.stderr.strip()}")
    out, kern, attr = {}, None, None
    for line in p.stdout.splitlines():
        if line.startswith("."):
            kern = line[len(".nv.info."):].strip() if line.startswith(".nv.info.") else None
            if kern:
                out.setdefault(kern, [None, []])
            continue
        if kern is None:
            continue
        m = re.match(r"^\s*Attribute:\s*(\S+)", line)
        if m:
            attr = m.group(1)
            continue
        if attr == "EIATTR_KPARAM_INFO":
            m = re.search(r"Ordinal\s*:\s*(0x[0-9a-f]+)\s+Offset\s*:\s*(0x[0-9a-f]+)\s+Size\s*:\s*(0x[0-9a-f]+)", line)
            if m:
                out[kern][1].append(tuple(int(g, 16) for g in m.groups()))
        elif attr == "EIATTR_PARAM_CBANK":
            m = re.search(r"Value:\s*0x[0-9a-f]+\s+(0x[0-9a-f]+)", line)
            if m:
                out[kern][0] = int(m.group(1), 16) & 0xFFFF
    return {k: (b, sorted(ps)) for k, (b, ps) in out.items() if b is not None}


# ------------------------------------------------------------------------------------------- rules
def load_rules(path):
    with open(path, "rb") as f:
        rules = tomllib.load(f)
    for name, p in rules.get("path", {}).items():
        if not p.get("allow"):
            raise AuditError(f"{path}: path {name!r} has no allow list")
    for k in rules.get("kernel", []):
        if k.get("path") not in rules.get("path", {}):
            raise AuditError(f"{path}: kernel entry {k.get('name')!r} names unknown path {k.get('path')!r}")
    return rules


def kernel_rule(rules, name):
    for k in rules.get("kernel", []):
        if fnmatch.fnmatchcase(name, k["name"]):
            return k
    return None


# ------------------------------------------------------------------------------------------- taint
# The abstract value of one register is a pair (origin, prov): `origin` is the address of the
# instruction that introduced secret data (the smallest one when several reach it), None when clean;
# `prov` the set of parameter-buffer words (byte offsets, 4-byte granularity) the value was computed
# from, used to prove a global load public. Both only grow under join, so the fixed point exists and
# the worklist reaches it.
#
# A third element, `bits`, is the mask of the 32 bits that may be secret (0 when clean, FULL for a
# predicate or after ordinary arithmetic). It matters only where the compiler packs booleans into the
# bits of one register (LOP3 with an immediate sets, clears and tests single bits; P2R/R2P move
# predicates to and from bits): a secret bit must not make its public neighbours secret.
# Invariant: origin is None exactly when bits == 0.
FULL = 0xFFFFFFFF
CLEAN = (None, frozenset(), 0)


def join_val(a, b):
    oa, pa, ba = a
    ob, pb, bb = b
    o = oa if ob is None else ob if oa is None else min(oa, ob)
    return (o, pa | pb, ba | bb)


def taint(origin, prov=frozenset(), bits=FULL):
    """A value with that origin (None: clean), provenance and secret bits (ignored when clean)."""
    if origin is None or not bits:
        return (None, prov, 0)
    return (origin, prov, bits)


PLAIN_REG = re.compile(r"U?R(\d+|Z)(\.reuse)?")


def lut_bit(lut, a, b, c):
    return (lut >> (4 * a + 2 * b + c)) & 1


def lop3_plan(lut, kinds):
    """Static part of LOP3's bit-level rule. kinds: per LUT input (a, b, c), ('const', K) or ('reg', k).
    Returns [(positions mask, inputs the output depends on, inputs the output equals)] over the bit
    positions grouped by the constants' bits. The output bit depends on a register input if flipping
    it can flip the output for some value of the other register inputs (which are unknown)."""
    consts = [j for j, (t, _) in enumerate(kinds) if t == "const"]
    regs = [j for j, (t, _) in enumerate(kinds) if t == "reg"]
    plan = []
    for assign in range(1 << len(consts)):
        mask = FULL
        vals = [0, 0, 0]
        for n, j in enumerate(consts):
            bit = (assign >> n) & 1
            vals[j] = bit
            mask &= kinds[j][1] if bit else ~kinds[j][1] & FULL
        if not mask:
            continue
        dep, ident = [], []
        for j in regs:
            others = [r for r in regs if r != j]
            depends, identity = False, True
            for oa in range(1 << len(others)):
                for n, r in enumerate(others):
                    vals[r] = (oa >> n) & 1
                vals[j] = 0
                f0 = lut_bit(lut, *vals)
                vals[j] = 1
                f1 = lut_bit(lut, *vals)
                depends |= f0 != f1
                identity &= (f0, f1) == (0, 1)
            if depends:
                dep.append(j)
            if identity:
                ident.append(j)
        plan.append((mask, dep, ident))
    return plan


class State:
    """Abstract state at one program point: `regs` maps a register (R7, UR4, P0, UP1) to its value
    (absent = CLEAN); `sh` holds guard-specific values: sh[r][(P, negated)] is r's value in the
    executions where that guard holds. It is what makes `@P5 LEA R36, ...; @P5 LDG [R36.64]` precise:
    the load reads the value written under the same guard, not the value before it. A shadow is
    dropped when its predicate is rewritten, so it is never read under a different meaning."""
    __slots__ = ("regs", "sh")

    def __init__(self, regs=None, sh=None):
        self.regs = regs if regs is not None else {}
        self.sh = sh if sh is not None else {}

    def copy(self):
        return State(dict(self.regs), {r: dict(g) for r, g in self.sh.items()})

    def __eq__(self, other):
        return self.regs == other.regs and self.sh == other.sh

    def join(self, other):
        regs = dict(self.regs)
        for k, v in other.regs.items():
            regs[k] = join_val(regs[k], v) if k in regs else v
        sh = {}
        for r in set(self.sh) | set(other.sh):
            a, b = self.sh.get(r, {}), other.sh.get(r, {})
            a_any, b_any = self.regs.get(r, CLEAN), other.regs.get(r, CLEAN)
            any_v = regs.get(r, CLEAN)
            gs = {}
            for g in set(a) | set(b):
                v = join_val(a.get(g, a_any), b.get(g, b_any))
                if v != any_v:
                    gs[g] = v
            if gs:
                sh[r] = gs
        return State(regs, sh)


ALL_P = [f"P{i}" for i in range(7)]


def expand(name, width):
    """Register name with width -> the architectural registers it covers."""
    if name in ("RZ", "URZ", "PT", "UPT"):
        return []
    if name == "PR":
        return ALL_P
    m = re.fullmatch(r"(UR|R)(\d+)", name)
    if m:
        return [f"{m.group(1)}{int(m.group(2)) + i}" for i in range(width)]
    return [name]


class KernelAnalysis:
    def __init__(self, kernel, krule, params, flow_insensitive=False):
        self.k = kernel
        self.instrs = kernel.instrs
        self.by_addr = {ins.addr: i for i, ins in enumerate(self.instrs)}
        self.params = params          # (cbank base, [(ordinal, offset, size)]) or None: layout unknown
        self.flow_insensitive = flow_insensitive
        self.shared_origin = None     # address of the first store of secret data to shared memory
        self.local_origin = None
        self.secret_loads = {}        # address -> parameter words its address came from (for messages)
        self.lop3_plans = {}          # address -> static part of the LOP3 bit-level rule
        # Provenance is tracked per 4-byte word of the parameter buffer (offset from its start), so a
        # field of a struct parameter (kernels/exact.cu passes one `Params`) can be declared public.
        self.public_words, self.scalar_words = set(), set()
        if params is not None:
            for o, off, size in params[1]:
                words = set(range(off & ~3, off + size, 4))
                if o in krule.get("public_params", []):
                    self.public_words |= words
                elif size <= 4 or o in krule.get("scalar_params", []):
                    self.scalar_words |= words  # an int/float: a shape or flag, never an address base
            for key, dest in (("public_param_bytes", self.public_words), ("scalar_param_bytes", self.scalar_words)):
                for lo, hi in krule.get(key, []):
                    dest |= set(range(lo & ~3, hi, 4))
            self.scalar_words -= self.public_words

    # -- parameters
    def const_prov(self, op, width):
        """Parameter words an operand c[0x0][off] reads (width in 32-bit registers)."""
        if self.params is None or op.const is None or op.const[0] != 0:
            return frozenset()
        base, plist = self.params
        end = max((off + size for _, off, size in plist), default=0)
        if op.const[1] is None:  # register-indexed parameter read: could be any parameter word
            return frozenset(range(0, end, 4))
        lo = op.const[1] - base
        return frozenset(w for w in range(lo & ~3, lo + 4 * width, 4) if 0 <= w < end)

    def describe_params(self, prov):
        def name(w):
            for o, off, size in (self.params[1] if self.params else []):
                if off <= w < off + size:
                    return f"param {o}" + (f"+0x{w - off:x}" if size > 8 else "")
            return f"param word 0x{w:x}"
        names = []
        for w in sorted(prov):
            n = name(w) + (" (public)" if w in self.public_words else "")
            if n not in names:
                names.append(n)
        return ", ".join(names) or "no parameter"

    # -- operand roles
    def widths(self, ins):
        """(dest width, dest width certain?, default source width) for register operands."""
        b, mods = ins.base, ins.mods
        if b in GMMA_OPS:
            return gmma_acc_regs(mods), True, 4
        if b in MMA_OPS:
            return 4, False, 4
        if b in DOUBLE_OPS or "64" in mods and b not in ("SHF", "USHF"):
            w = 2
            if b in CONVERSIONS:
                return 2, False, 2
            return w, True, (2 if b in DOUBLE_OPS or b in ("MOV", "UMOV", "IADD", "UIADD") else 1)
        if "128" in mods:
            return 4, True, 1
        if b in CONVERSIONS and any(m in ("F64", "S64", "U64") for m in mods):
            return 2, False, 2
        if b in ("IMAD", "UIMAD") and "WIDE" in mods:
            return 2, True, 1
        if b == "CS2R":
            return (1, True, 1) if "32" in mods else (2, True, 1)
        if b == "LDSM":
            n = 4 if "4" in mods else 2 if "2" in mods else 1
            return n, True, 1
        return 1, True, 1

    def roles(self, ins):
        """-> (dests [(name, width, certain)], sources [(name, width)], const operands [(op, width)],
        address registers, predicate operands (non-guard) read)."""
        ops = ins.ops
        dw, dcert, sw = self.widths(ins)
        dests, srcs, consts, addr, preds = [], [], [], [], []
        ndest = 0
        b = ins.base
        if b not in NO_REG_DEST and ops and ops[0].regs and not ops[0].mem and ops[0].const is None:
            if b in TWO_PRED_DEST:
                ndest = 2
            elif b in ("VOTE", "VOTEU"):
                ndest = len(ops) - 1
            else:
                ndest = 1
                # LOP3.LUT P0, R1, ...; SHFL.BFLY PT, R3, ...: a predicate then a register, both written
                if b != "R2P" and ops[0].is_pred and len(ops) > 1 and not ops[1].is_pred and ops[1].regs \
                        and not ops[1].mem and ops[1].const is None:
                    ndest = 2
        # IADD3 R1, P0, P1, ...; LEA R2, P0, ...: plain predicates right after the destinations are
        # carry/flag outputs; treat them as both written and read (sound either way, may over-taint).
        # For the integer adders below, SASS lists carry-outs right after the destination and carry-ins
        # last, so the leading ones are written only; for any other opcode they count as both.
        amb_end = ndest
        if ndest and b not in TWO_PRED_DEST and b not in ("VOTE", "VOTEU"):
            while amb_end < len(ops) and ops[amb_end].is_pred and not ops[amb_end].neg \
                    and ops[amb_end].regs[0][0] != "PR":
                amb_end += 1
        carry_out = b in CARRY_OUT_OPS
        wide_addend = b in ("IMAD", "UIMAD") and "WIDE" in ins.mods
        is_store = b in STORES_GLOBAL | STORES_SHARED | STORES_LOCAL
        for i, op in enumerate(ops):
            if i < ndest:
                for name, w in op.regs:
                    dests.append((name, 1 if op.is_pred else max(w, dw), dcert and b != "R2P"))
                continue
            if i < amb_end:
                name = op.regs[0][0]
                dests.append((name, 1, carry_out))
                if not carry_out:
                    srcs.append((name, 1))
                continue
            if op.const is not None:
                cw = 2 if wide_addend and i == 3 else dw if b in ("LDC", "ULDC", "LDCU") else sw
                consts.append((op, cw))
            for name, w in op.regs:
                if op.mem:
                    addr.append((name, w))
                elif op.is_pred:
                    preds.append(name)
                    srcs.append((name, 1))
                else:
                    width = w
                    if wide_addend and i == 3:
                        width = 2  # IMAD.WIDE R2, R4, R5, R6: the addend R6:R7 is 64-bit
                    elif w == 1:
                        width = dw if is_store else sw
                    srcs.append((name, width))
        if b in GMMA_OPS:
            # A (before the descriptor) is four registers, the accumulator Rc (after it) as wide as
            # the destination; a descriptor is 64 bits per shared operand (up to four uniform registers)
            srcs, seen_desc = [(n, 1) for n in preds], False
            for op in ops[ndest:]:
                seen_desc |= op.mem
                if not op.mem and not op.is_pred:
                    srcs += [(n, dw if seen_desc else 4) for n, _ in op.regs]
            addr = [(n, 4) for n, _ in addr]
        if b in ("R2P", "P2R"):
            # P2R R12, PR, RZ, 0x1 reads only P0; R2P PR, R0, 0x7f writes P0..P6: the mask decides.
            mask = 0x7F
            if ops and re.fullmatch(r"0x[0-9a-f]+", ops[-1].text):
                mask = int(ops[-1].text, 16)
            sel = [f"P{k}" for k in range(7) if mask >> k & 1]
            if b == "R2P":
                dests = [(p, 1, True) for p in sel]
            else:
                srcs = [x for x in srcs if x[0] != "PR"] + [(p, 1) for p in sel]
                preds = [x for x in preds if x != "PR"] + sel
        return dests, srcs, consts, addr, preds

    # -- transfer
    def val(self, st, name, width=1, guard=None):
        """Value of a register operand read by an instruction with that guard."""
        v = CLEAN
        for r in expand(name, width):
            rv = st.regs.get(r, CLEAN)
            if guard is not None:
                rv = st.sh.get(r, {}).get(guard, rv)
            v = join_val(v, rv)
        return v

    def load_is_public(self, addr_prov):
        """A global load is public when its address is computed from a public pointer and otherwise
        only from scalar parameters (any other parameter word may belong to a secret pointer)."""
        return bool(addr_prov & self.public_words) and addr_prov <= self.public_words | self.scalar_words

    def write(self, st, r, v, guard, certain):
        old = st.regs.get(r, CLEAN)
        if self.flow_insensitive:
            nv = join_val(old, v)
            if nv != CLEAN:
                st.regs[r] = nv
            return
        if certain and guard is None:  # strong update: the old value is gone
            if v == CLEAN:
                st.regs.pop(r, None)
            else:
                st.regs[r] = v
            st.sh.pop(r, None)
            return
        old_sh = st.sh.get(r, {})
        any_v = join_val(old, v)
        gs = {g: join_val(gv, v) for g, gv in old_sh.items()}
        if certain:  # written exactly when the guard holds, untouched when it does not
            gs[guard] = v
            comp = (guard[0], not guard[1])
            gs[comp] = old_sh.get(comp, old)
        gs = {g: gv for g, gv in gs.items() if gv != any_v}
        if any_v != CLEAN:
            st.regs[r] = any_v
        if gs:
            st.sh[r] = gs
        else:
            st.sh.pop(r, None)

    def bit_precise(self, ins, st, guard, v):
        """{dest register: value} for the instructions with a bit-level rule (LOP3 with constants,
        moves, selects, P2R/R2P); None for every other instruction (all its dests get v)."""
        b, ops = ins.base, ins.ops
        gv = self.val(st, guard[0]) if guard else CLEAN
        if b in ("LOP3", "ULOP3") and ins.mods[:1] == ["LUT"]:
            nd = 2 if ops and ops[0].is_pred else 1
            if len(ops) < nd + 4 or not re.fullmatch(r"0x[0-9a-f]+", ops[nd + 3].text):
                return None
            key = ins.addr
            plan = self.lop3_plans.get(key)
            inputs = ops[nd:nd + 3]
            if plan is None:
                kinds = []
                for op in inputs:
                    if op.const is not None or op.mem:
                        kinds.append(("reg", None))  # a parameter: public, unknown value
                    elif op.regs and not PLAIN_REG.fullmatch(op.text):
                        return None  # a modified operand: no bit-level rule
                    elif op.regs:
                        name = op.regs[0][0]
                        kinds.append(("const", 0) if name in ("RZ", "URZ") else ("reg", name))
                    else:
                        try:
                            kinds.append(("const", int(op.text, 0) & FULL))
                        except ValueError:
                            return None
                plan = (lop3_plan(int(ops[nd + 3].text, 16), kinds), kinds)
                self.lop3_plans[key] = plan
            plan, kinds = plan
            ibits = [self.val(st, k[1], 1, guard)[2] if k[0] == "reg" and k[1] else 0 for k in kinds]
            out = ident = 0
            for mask, dep, idn in plan:
                for j in dep:
                    out |= mask & ibits[j]
            pin = ops[nd + 4] if len(ops) > nd + 4 else None
            if pin is not None and pin.is_pred and self.val(st, pin.regs[0][0], 1, guard)[0] is not None:
                out = FULL  # the predicate input also feeds the result
            dest_name = ops[nd - 1].regs[0][0] if ops[nd - 1].regs else None
            for mask, dep, idn in plan:  # bits where a guarded write leaves the dest as it was
                ident |= mask if any(kinds[j] == ("reg", dest_name) for j in idn) else 0
            if gv[0] is not None:  # which value survives depends on the guard, except where equal
                out |= FULL & ~ident
            val = taint(v[0] if out else None, v[1], out)
            res = {}
            if ops[0].is_pred:
                res[ops[0].regs[0][0]] = taint(val[0], v[1], FULL if out else 0)
            if dest_name and not ops[nd - 1].is_pred:
                res[dest_name] = val
            return res
        if b in ("MOV", "UMOV") or (b == "IMAD" and "MOV" in ins.mods):
            src = ops[-1] if ops else None
            if src is None or not PLAIN_REG.fullmatch(src.text) or any("64" in m for m in ins.mods):
                return None  # -R9, |R3|, a constant, an immediate, a pair: the generic rule
            sv = self.val(st, src.regs[0][0], 1, guard)
            out = sv[2] | (FULL if gv[0] is not None else 0)
            return {n: taint(v[0] if out else None, v[1], out) for n, _ in ops[0].regs}
        if b in ("SEL", "FSEL", "USEL") and len(ops) == 4 and ops[3].is_pred:
            out = FULL if gv[0] is not None or self.val(st, ops[3].regs[0][0], 1, guard)[0] is not None else 0
            for op in ops[1:3]:
                for n, w in op.regs:
                    bits = self.val(st, n, w, guard)[2]
                    out |= bits if PLAIN_REG.fullmatch(op.text) or not bits else FULL
            return {n: taint(v[0] if out else None, v[1], out) for n, _ in ops[0].regs}
        if b in ("P2R", "R2P") and ops and re.fullmatch(r"0x[0-9a-f]+", ops[-1].text):
            mask = int(ops[-1].text, 16) & 0x7F
            # P2R.B1 / R2P PR, R0.B1: the predicates sit in byte 1 (2, 3); any other spelling: no rule
            bsel = [m for m in ins.mods if re.fullmatch(r"B[0-3]", m)] + \
                re.findall(r"\.(B[0-3])\b", " ".join(op.text for op in ops[1:-1]))
            if len(bsel) > 1 or any(not PLAIN_REG.fullmatch(re.sub(r"\.B[0-3]\b", "", op.text))
                                    for op in ops[1:-1] if op.text != "PR"):
                return None
            shift = 8 * int(bsel[0][1]) if bsel else 0
            gbits = FULL if gv[0] is not None else 0
            if b == "P2R" and len(ops) == 4 and ops[1].text == "PR":
                out = 0
                for n, w in ops[2].regs:
                    out |= self.val(st, n, w, guard)[2] & ~(mask << shift) & FULL
                for k in range(7):
                    if mask >> k & 1 and self.val(st, f"P{k}", 1, guard)[0] is not None:
                        out |= 1 << (k + shift)
                out |= gbits
                return {n: taint(v[0] if out else None, v[1], out) for n, _ in ops[0].regs}
            if b == "R2P" and len(ops) == 3 and ops[0].text == "PR":
                sbits = 0
                for n, w in ops[1].regs:
                    sbits |= self.val(st, n, w, guard)[2]
                return {f"P{k}": taint(v[0] if (sbits >> (k + shift) & 1) or gbits else None, v[1])
                        for k in range(7) if mask >> k & 1}
        return None

    def transfer(self, i, st, record=None):
        """Apply instruction i to state st (modified in place)."""
        ins = self.instrs[i]
        dests, srcs, consts, addr, preds = self.roles_of[i]
        b = ins.base
        guard = (ins.guard[1], ins.guard[0]) if ins.guard else None
        v = CLEAN
        if guard:
            # predicated writes carry the guard's taint (which value survives depends on it)
            v = taint(self.val(st, guard[0])[0])
        addr_v = CLEAN
        for name, w in addr:
            addr_v = join_val(addr_v, self.val(st, name, w, guard))
        if b in GLOBAL_LOADS:
            if not self.load_is_public(addr_v[1]):
                v = join_val(v, taint(ins.addr))
                self.secret_loads[ins.addr] = self.secret_loads.get(ins.addr, frozenset()) | addr_v[1]
            else:
                v = join_val(v, taint(addr_v[0]))
        elif b in SHARED_LOADS:
            v = join_val(v, taint(self.shared_origin))
            v = join_val(v, taint(addr_v[0]))
        elif b in GMMA_OPS:  # registers and shared memory in, the accumulator out
            v = join_val(v, taint(self.shared_origin))
            v = join_val(v, taint(addr_v[0]))
            for name, w in srcs:
                v = join_val(v, self.val(st, name, w, guard))
        elif b in LOCAL_LOADS:
            v = join_val(v, taint(self.local_origin))
            v = join_val(v, taint(addr_v[0]))
        else:
            for name, w in srcs:
                v = join_val(v, self.val(st, name, w, guard))
            for op, w in consts:
                v = join_val(v, (None, self.const_prov(op, w), 0))
            if addr:  # LDC R0, c[0x0][R2]: value depends on the index
                v = join_val(v, taint(addr_v[0]))
        if b in UNTAINTED_SOURCES and not addr:
            v = taint(v[0] if guard else None, v[1])
        v = taint(v[0], v[1])  # ordinary arithmetic: any secret input makes every bit secret
        per_dest = self.bit_precise(ins, st, guard, v)
        # Stores into shared / local memory: remember whether secret data went there.
        if record is not None:
            data_v = CLEAN
            for name, w in srcs:
                data_v = join_val(data_v, self.val(st, name, w, guard))
            if guard:
                data_v = join_val(data_v, taint(self.val(st, guard[0])[0]))
            # the origin recorded is the store itself, so that messages say "through shared memory"
            if (b in STORES_SHARED or b == "ATOMS") and data_v[0] is not None:
                record["shared"] = min(x for x in (record["shared"], ins.addr) if x is not None)
            if b in GLOBAL_TO_SHARED and (b != "LDGSTS" or not self.load_is_public(addr_v[1])):
                record["shared"] = min(x for x in (record["shared"], ins.addr) if x is not None)
            if b in STORES_LOCAL and data_v[0] is not None:
                record["local"] = min(x for x in (record["local"], ins.addr) if x is not None)
            if b in ("ST", "ATOM") and data_v[0] is not None:  # generic address: may be shared or local
                for key in ("shared", "local"):
                    record[key] = min(x for x in (record[key], ins.addr) if x is not None)
        written_preds = []
        for name, w, certain in dests:
            for r in expand(name, w):
                self.write(st, r, per_dest.get(r, v) if per_dest else v, guard, certain)
                if r[0] in "PU" and not r.startswith("UR"):
                    written_preds.append(r)
        if written_preds and st.sh:  # guard-specific values keyed on a rewritten predicate are stale
            wp = set(written_preds)
            for r in list(st.sh):
                gs = {g: gv for g, gv in st.sh[r].items() if g[0] not in wp}
                if gs:
                    st.sh[r] = gs
                else:
                    del st.sh[r]

    # -- control flow graph
    def successors(self, i):
        ins = self.instrs[i]
        b = ins.base
        nxt = [i + 1] if i + 1 < len(self.instrs) else []
        target = None
        if ins.ops and re.fullmatch(r"0x[0-9a-f]+", ins.ops[-1].text.split()[-1]):
            target = self.by_addr.get(int(ins.ops[-1].text.split()[-1], 16))
        # BRA.DIV, BRA.CONV, a predicate operand (BRA !P2, ...) or a guard: may also fall through.
        conditional = ins.guard is not None or any(op.is_pred for op in ins.ops) or \
            any(m != "U" for m in ins.mods)
        if b in ("BRA", "JMP"):
            if target is None:
                return list(range(len(self.instrs)))  # unknown target: anything
            return [target] + (nxt if conditional else [])
        if b in ("BRX", "BRXU", "JMX", "JMXU"):
            return list(range(len(self.instrs)))  # indirect: anywhere (also a rule violation)
        if b == "CALL":
            return ([target] if target is not None else list(range(len(self.instrs)))) + nxt
        if b == "RET":
            rets = [j + 1 for j, x in enumerate(self.instrs) if x.base == "CALL" and j + 1 < len(self.instrs)]
            return rets + (nxt if ins.guard else [])
        if b in ("EXIT", "KILL"):
            return nxt if ins.guard is not None else []
        return nxt

    def blocks(self):
        """Basic blocks [(start, end)] and their successor blocks."""
        n = len(self.instrs)
        succ = [self.successors(i) for i in range(n)]
        leaders = {0} if n else set()
        for i, ss in enumerate(succ):
            if ss != [i + 1]:
                leaders.update(ss)
                if i + 1 < n:
                    leaders.add(i + 1)
        starts = sorted(leaders)
        blocks = [(a, b) for a, b in zip(starts, starts[1:] + [n])]
        index = {a: k for k, (a, _) in enumerate(blocks)}
        bsucc = [[index[j] for j in succ[b - 1]] for _, b in blocks]
        return blocks, bsucc

    def run(self):
        """Fixed point over the control-flow graph; returns (blocks, in-state of each block)."""
        self.roles_of = [self.roles(ins) for ins in self.instrs]
        blocks, bsucc = self.blocks()
        while True:
            record = {"shared": self.shared_origin, "local": self.local_origin}
            if self.flow_insensitive:
                st = State()
                while True:
                    before = st.copy()
                    for i in range(len(self.instrs)):
                        self.transfer(i, st, record)
                    if st == before:
                        break
                ins_states = [st] * len(blocks)
            else:
                ins_states = [None] * len(blocks)
                if blocks:
                    ins_states[0] = State()
                work = [0] if blocks else []
                inwork = set(work)
                while work:
                    k = work.pop()
                    inwork.discard(k)
                    st = ins_states[k].copy()
                    for i in range(*blocks[k]):
                        self.transfer(i, st, record)
                    for j in bsucc[k]:
                        old = ins_states[j]
                        new = st.copy() if old is None else old.join(st)
                        if old is None or new != old:
                            ins_states[j] = new
                            if j not in inwork:
                                work.append(j)
                                inwork.add(j)
                ins_states = [s if s is not None else State() for s in ins_states]
            if (record["shared"], record["local"]) == (self.shared_origin, self.local_origin):
                return blocks, ins_states
            self.shared_origin, self.local_origin = record["shared"], record["local"]

    def why(self, v):
        origin = v[0]
        i = self.by_addr.get(origin)
        if i is None:
            return "secret data"
        src = self.instrs[i]
        if src.base in GLOBAL_LOADS:
            return (f"{src.base} at /*{src.addr:04x}*/ `{src.text}` (global load, address from "
                    f"{self.describe_params(self.secret_loads.get(src.addr, frozenset()))}: not proven public)")
        if src.base in STORES_SHARED | GLOBAL_TO_SHARED | {"ATOMS"}:
            return f"shared memory holding secret data (stored at /*{src.addr:04x}*/ `{src.text}`)"
        if src.base in ("ST", "ATOM"):
            return f"shared or local memory holding secret data (generic store at /*{src.addr:04x}*/ `{src.text}`)"
        if src.base in STORES_LOCAL:
            return f"local memory holding secret data (stored at /*{src.addr:04x}*/ `{src.text}`)"
        return f"/*{src.addr:04x}*/ `{src.text}`"

    def check(self):
        """-> [(instr, rule, message)] taint violations."""
        blocks, states = self.run()
        self.block_start = [0] * len(self.instrs)
        for lo, hi in blocks:
            for i in range(lo, hi):
                self.block_start[i] = lo
        out = []
        for (lo, hi), bst in zip(blocks, states):
            st = bst.copy()
            for i in range(lo, hi):
                self.check_one(i, st, out)
                if not self.flow_insensitive:
                    self.transfer(i, st)
        return out

    def definer(self, i, name):
        """The nearest instruction before i (listing order, same basic block) that writes `name`."""
        regs = set(expand(name, 1))
        for j in range(i - 1, self.block_start[i] - 1, -1):
            if any(set(expand(n, w)) & regs for n, w, _ in self.roles_of[j][0]):
                x = self.instrs[j]
                return f"; {name} set at /*{x.addr:04x}*/ `{x.text}`"
        return f"; {name} set in a predecessor block"

    def check_one(self, i, st, out):
        ins = self.instrs[i]
        b = ins.base
        dests, srcs, consts, addr, preds = self.roles_of[i]
        guard = (ins.guard[1], ins.guard[0]) if ins.guard else None
        guard_v = self.val(st, guard[0]) if guard else CLEAN
        gname = f"{'!' if ins.guard[0] else ''}{ins.guard[1]}" if guard else ""
        if b in CONTROL or b in SYNC_BARRIER:  # guard and every operand public
            rule = "taint-barrier" if b in SYNC_BARRIER else "taint-branch"
            if guard_v[0] is not None:
                out.append((ins, rule, f"guard {gname} is secret-dependent, from {self.why(guard_v)}"
                            + self.definer(i, guard[0])))
            for name, w in srcs + addr:
                v = self.val(st, name, w, guard)
                if v[0] is not None:
                    out.append((ins, rule, f"operand {name} is secret-dependent, from {self.why(v)}"
                                + self.definer(i, name)))
        elif b in MEMORY or addr:
            if guard_v[0] is not None:
                out.append((ins, "taint-memory-guard",
                            f"memory access predicated on secret-dependent {gname}, from {self.why(guard_v)}"
                            + self.definer(i, guard[0])))
            for name, w in addr:
                v = self.val(st, name, w, guard)
                if v[0] is not None:
                    out.append((ins, "taint-address", f"address register {name} is secret-dependent, from {self.why(v)}"
                                + self.definer(i, name)))
            if b in STORES_GLOBAL | {"ATOM", "ATOMG"}:
                prov = frozenset()
                for name, w in addr:
                    prov |= self.val(st, name, w, guard)[1]
                if prov & self.public_words:
                    out.append((ins, "public-store", f"store into a buffer declared public ({self.describe_params(prov)}): "
                                "public loads are only sound for buffers the kernel never writes"))
            for name in preds:
                v = self.val(st, name, 1, guard)
                if v[0] is not None:
                    out.append((ins, "taint-memory-guard", f"predicate operand {name} is secret-dependent, from {self.why(v)}"))


# ------------------------------------------------------------------------------------------- audit
def convergent_jump(ins, by_addr, has_ret):
    """`@P0 CALL.REL.NOINC <addr>` in a kernel without any RET: the sm_80..sm_89 compilers' way to
    leave a loop (`@P0 CALL.REL.NOINC L; BRA loop_head; L: ...`). NOINC pushes no return address and
    nothing in the kernel could return, so it is a conditional jump, not a subroutine call: the CALL
    rule does not apply, and the taint pass checks its guard like any branch's. A real call (the IEEE
    division slow path) always comes with a RET, and then every CALL is reported."""
    if ins.base != "CALL" or "NOINC" not in ins.mods or has_ret or not ins.ops:
        return False
    t = ins.ops[-1].text
    return re.fullmatch(r"0x[0-9a-f]+", t) is not None and int(t, 16) in by_addr


def audit_kernel(kernel, rules, res, params, label, flow_insensitive=False):
    """-> (list of violation lines, summary)."""
    viol = []
    krule = kernel_rule(rules, kernel.name)

    def add(ins, rule, msg):
        where = f"addr=0x{ins.addr:04x} line={ins.line}" if ins else "addr=- line=-"
        text = f" `{ins.text}`" if ins else ""
        viol.append(f"VIOLATION {label} kernel={kernel.name} {where}{text} rule={rule}: {msg}")

    if krule is None:
        add(None, "no-rule", "no [[kernel]] entry in the rules file matches this kernel: declare its path, "
            "public parameters and budgets")
        return viol, "no rule"
    path = rules["path"][krule["path"]]
    allow = set(path["allow"])
    forbid = path.get("forbid", {})
    by_addr = {ins.addr: ins for ins in kernel.instrs}
    has_ret = any(ins.base == "RET" for ins in kernel.instrs)
    for ins in kernel.instrs:
        if convergent_jump(ins, by_addr, has_ret):
            continue  # a jump, audited as a branch by the taint pass
        reason = next((r for pat, r in forbid.items() if fnmatch.fnmatchcase(ins.base, pat)
                       or fnmatch.fnmatchcase(ins.opcode, pat)), None)
        if reason:
            add(ins, f"{krule['path']}.forbid.{ins.base}", reason)
        elif ins.base not in allow:
            add(ins, f"{krule['path']}.allow", f"opcode {ins.base} is not in the allow-list of path {krule['path']!r}")
    # budgets
    r = res.get(kernel.name) if res is not None else None
    if res is None:
        add(None, "budget", "no -res-usage listing given: budgets not checked")
    elif r is None:
        add(None, "budget", "kernel missing from the -res-usage listing")
    else:
        for key, limit in (("REG", "max_registers"), ("SHARED", "max_shared_bytes"), ("STACK", "max_stack_bytes"),
                           ("LOCAL", "max_local_bytes")):
            if limit not in krule:
                add(None, "budget", f"rules entry {krule['name']!r} has no {limit}")
            elif r.get(key, 0) > krule[limit]:
                add(None, f"budget.{limit}", f"{key}:{r.get(key)} exceeds {limit} = {krule[limit]}")
    # taint
    kp = None
    if params is not None:
        kp = params.get(kernel.name)
        if kp is None:
            add(None, "params", "kernel missing from the cubin's .nv.info: parameter layout unknown")
    if kp is not None:  # the annotation names parameters by position: the layout must be the one it describes
        extent = max((off + size for _, off, size in kp[1]), default=0)
        for key, got in (("param_count", len(kp[1])), ("param_bytes", extent)):
            if key in krule and krule[key] != got:
                add(None, "params", f"the kernel has {key} = {got}, the rules entry {krule['name']!r} says "
                    f"{krule[key]}: the parameter layout changed, re-check public/scalar parameters")
    an = KernelAnalysis(kernel, krule, kp, flow_insensitive)
    for ins, rule, msg in an.check():
        add(ins, rule, msg)
    # A kernel the host may launch early (`early_launch`: programmatic dependent launch, sm_90 and
    # later) must wait for the previous grid (ACQBULK, griddepcontrol.wait) before it touches what
    # that grid may write: no global load of non-public memory (the taint pass's secret loads), no
    # copy from global to shared memory and no global store may come before the first ACQBULK in the
    # listing.
    m = re.match(r"sm_(\d+)", kernel.arch)
    if krule.get("early_launch") and m and int(m.group(1)) >= 90:
        waited = False
        for ins in kernel.instrs:
            if ins.base == "ACQBULK" and ins.guard is None:
                waited = True
            elif not waited and (ins.addr in an.secret_loads or ins.base in STORES_GLOBAL
                                 or ins.base in GLOBAL_TO_SHARED):
                add(ins, "early-wait", f"{ins.base} before the kernel waits for the previous grid (ACQBULK): "
                    "launched early, it may touch memory that grid is still writing")
    tainted_loads = sum(1 for ins in kernel.instrs if ins.base in GLOBAL_LOADS)
    summary = (f"{len(kernel.instrs)} instructions, {tainted_loads} global loads, shared "
               f"{'secret' if an.shared_origin is not None else 'public'}, path {krule['path']}"
               + (", params unknown: every global load is secret" if kp is None else ""))
    return viol, summary


def audit_listing(sass_path, res_path, cubin_path, rules, label, flow_insensitive=False, quiet=False):
    """Audit one listing -> (output lines, number of failed kernels, or 1 when it cannot be audited)."""
    out = []
    try:
        kernels = parse_listing(Path(sass_path).read_text())
        res = parse_res(Path(res_path).read_text()) if res_path else None
        params = param_layout(cubin_path) if cubin_path else None
    except (AuditError, OSError) as e:
        return [f"FAIL {label}: cannot audit: {e}"], 1
    if not kernels:
        return [f"FAIL {label}: no Function in the listing"], 1
    failed = 0
    for k in kernels:
        viol, summary = audit_kernel(k, rules, res, params, label, flow_insensitive)
        if viol:
            failed += 1
            out.append(f"FAIL {label} {k.name} ({summary}; {len(viol)} violation(s))")
            out.extend("  " + v for v in viol)
        elif not quiet:
            out.append(f"OK   {label} {k.name} ({summary})")
    return out, failed


def _audit_job(job):
    return audit_listing(*job)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rules", default=str(DEFAULT_RULES))
    ap.add_argument("--listing", help="audit this cuobjdump -sass file instead of audit/sass/")
    ap.add_argument("--res", help="with --listing: its cuobjdump -res-usage file")
    ap.add_argument("--cubin", help="with --listing: the cubin (parameter layout for public loads)")
    ap.add_argument("--flow-insensitive", action="store_true",
                    help="coarser taint pass: a register tainted anywhere is tainted everywhere")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--check-listings", action="store_true",
                    help="first run `python3 kernels/build.py sass --check` (listings current with the cubins)")
    args = ap.parse_args()
    if args.check_listings and subprocess.run([sys.executable, str(ROOT / "kernels/build.py"), "sass", "--check"]).returncode:
        print("sass_audit: FAIL (audit/sass/ is not the disassembly of kernels/cubin/)")
        return 1
    try:
        rules = load_rules(args.rules)
    except (AuditError, OSError, tomllib.TOMLDecodeError) as e:
        print(f"FAIL rules: {e}")
        return 1
    failed = 0
    if args.listing:
        label = Path(args.cubin).name if args.cubin else Path(args.listing).name
        lines, failed = audit_listing(args.listing, args.res, args.cubin, rules, label, args.flow_insensitive,
                                      args.quiet)
        if lines:
            print("\n".join(lines))
    else:
        listings = sorted(SASS_DIR.glob("*.sass"))
        cubins = sorted(CUBIN_DIR.glob("*.cubin"))
        if not listings and not cubins:
            print("sass_audit: no cubins and no listings yet; nothing to audit")
            return 0
        have = {p.name[:-len(".sass")] for p in listings}
        for c in cubins:
            if c.name[:-len(".cubin")] not in have:
                print(f"FAIL {c.name}: no listing audit/sass/{c.name[:-len('.cubin')]}.sass "
                      "(run `python3 kernels/build.py sass`)")
                failed += 1
        jobs = []
        for sass in listings:
            stem = sass.name[:-len(".sass")]
            cubin = CUBIN_DIR / f"{stem}.cubin"
            res = SASS_DIR / f"{stem}.res.txt"
            if not cubin.exists() or not res.exists():
                print(f"FAIL {stem}: missing {cubin if not cubin.exists() else res}")
                failed += 1
                continue
            jobs.append((sass, res, cubin, rules, cubin.name, args.flow_insensitive, args.quiet))
        # one process per listing (they are independent); output in listing order
        with ProcessPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1) or 1) as pool:
            for lines, nfail in pool.map(_audit_job, jobs):
                if lines:
                    print("\n".join(lines), flush=True)
                failed += nfail
    print(f"sass_audit: {'FAIL' if failed else 'OK'} ({failed} kernel(s) or file(s) failed)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
