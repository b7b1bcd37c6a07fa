//! keel's XDP program and how it is attached. The program is 20 eBPF instructions (21 slots), written
//! below as data (each with what it does) and loaded with bpf(2): no BPF compiler, no ELF
//! loader and no libbpf is needed to run keel on AF_XDP, and the listing is the source.
//!
//! It sends to the AF_XDP socket of the receiving queue (an XSKMAP entry) exactly the frames
//! keel's userspace stack owns, and passes everything else to the kernel:
//!
//! - IPv4 frames whose destination address is keel's (TCP to keel's sessions; ICMP echo,
//!   which the stack answers: `ping` works);
//! - ARP frames whose target address is keel's (so the stack answers for its address and
//!   learns its peers').
//!
//! keel's address is written into the instructions at load. A queue without a socket in the
//! map passes its frames to the kernel (the helper's fallback action).
//!
//! It is attached through a BPF link (`BPF_LINK_CREATE`), not the netlink attach: a link is
//! owned by its file descriptor, so the kernel detaches the program when the process exits
//! for any reason, `kill -9` included, and no stale program is left on the interface.

#![allow(unsafe_code)]

use std::net::Ipv4Addr;

// The program compares frame bytes read by little-endian loads with constants written for them.
#[cfg(target_endian = "big")]
compile_error!("keel's XDP program is written for little-endian hosts");
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::{XdpAttach, XdpError};

const BPF_MAP_CREATE: i32 = 0;
const BPF_MAP_UPDATE_ELEM: i32 = 2;
const BPF_PROG_LOAD: i32 = 5;
const BPF_LINK_CREATE: i32 = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
/// `bpf_redirect_map`, the helper's number in the kernel's table.
const HELPER_REDIRECT_MAP: i32 = 51;
const XDP_PASS: i32 = 2;
/// `src_reg` of a 64-bit immediate load that names a map by descriptor.
const PSEUDO_MAP_FD: u8 = 1;

/// One eBPF instruction, as the kernel reads it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | dst,
        off,
        imm,
    }
}

// Opcodes used (class | op | source).
const LDX_W: u8 = 0x61; // dst = *(u32 *)(src + off)
const LDX_H: u8 = 0x69; // dst = *(u16 *)(src + off)
const MOV64_X: u8 = 0xbf; // dst = src
const MOV64_K: u8 = 0xb7; // dst = imm
const ADD64_K: u8 = 0x07; // dst += imm
const JGT_X: u8 = 0x2d; // if dst > src goto +off
const JEQ_K: u8 = 0x15; // if dst == imm goto +off
const JA: u8 = 0x05; // goto +off
const JNE32_K: u8 = 0x56; // if (u32)dst != (u32)imm goto +off
const LD_DW: u8 = 0x18; // dst = imm64 (two slots)
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;

/// The frames' fields as a little-endian load reads them (the program runs on the host).
const ETH_P_IP_LE: i32 = 0x0008;
const ETH_P_ARP_LE: i32 = 0x0608;
/// Offsets in the frame: EtherType, IPv4 destination, ARP target address; the program
/// checks that the frame holds `FRAME_MIN_BYTES` before reading any of them.
const OFF_ETHERTYPE: i16 = 12;
const OFF_IPV4_DST: i16 = 14 + 16;
const OFF_ARP_TARGET: i16 = 14 + 24;
const FRAME_MIN_BYTES: i32 = 14 + 28;

/// Slots in the program (the 64-bit load takes two).
pub(crate) const PROGRAM_SLOTS: usize = 21;
/// The slot of the pass path, where every "not keel's" jump lands.
const PASS: i16 = 19;

/// A jump's offset from slot `at` to `PASS`.
const fn to_pass(at: i16) -> i16 {
    PASS - (at + 1)
}

/// The program for keel's address `ip`, with the XSKMAP `map_fd`, slot by slot.
pub(crate) fn listing(ip: Ipv4Addr, map_fd: RawFd) -> [Insn; PROGRAM_SLOTS] {
    let ip_le = u32::from_le_bytes(ip.octets()) as i32;
    [
        insn(LDX_W, 2, 1, 0, 0),                  // 0: r2 = ctx->data
        insn(LDX_W, 3, 1, 4, 0),                  // 1: r3 = ctx->data_end
        insn(MOV64_X, 4, 2, 0, 0),                // 2: r4 = r2
        insn(ADD64_K, 4, 0, 0, FRAME_MIN_BYTES),  // 3: r4 += 42
        insn(JGT_X, 4, 3, to_pass(4), 0),         // 4: frame shorter than 42: pass
        insn(LDX_H, 5, 2, OFF_ETHERTYPE, 0),      // 5: r5 = EtherType
        insn(JEQ_K, 5, 0, 2, ETH_P_IP_LE),        // 6: IPv4: goto 9
        insn(JEQ_K, 5, 0, 3, ETH_P_ARP_LE),       // 7: ARP: goto 11
        insn(JA, 0, 0, to_pass(8), 0),            // 8: anything else: pass
        insn(LDX_W, 5, 2, OFF_IPV4_DST, 0),       // 9: r5 = IPv4 destination
        insn(JA, 0, 0, 1, 0),                     // 10: goto 12
        insn(LDX_W, 5, 2, OFF_ARP_TARGET, 0),     // 11: r5 = ARP target address
        insn(JNE32_K, 5, 0, to_pass(12), ip_le),  // 12: not keel's address: pass
        insn(LDX_W, 2, 1, 16, 0),                 // 13: r2 = ctx->rx_queue_index
        insn(LD_DW, 1, PSEUDO_MAP_FD, 0, map_fd), // 14: r1 = the XSKMAP ...
        insn(0, 0, 0, 0, 0),                      // 15: ... (the load's upper half)
        insn(MOV64_K, 3, 0, 0, XDP_PASS),         // 16: r3 = no socket on the queue: pass
        insn(CALL, 0, 0, 0, HELPER_REDIRECT_MAP), // 17: r0 = bpf_redirect_map(r1, r2, r3)
        insn(EXIT, 0, 0, 0, 0),                   // 18: return r0
        insn(MOV64_K, 0, 0, 0, XDP_PASS),         // 19: pass: r0 = XDP_PASS
        insn(EXIT, 0, 0, 0, 0),                   // 20: return r0
    ]
}

/// The program loaded and attached, and its map. Dropping it closes the link: the kernel
/// detaches the program.
#[derive(Debug)]
pub(crate) struct Attached {
    map: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
}

#[repr(C)]
#[derive(Default)]
struct MapCreate {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
}

#[repr(C)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
struct MapUpdate {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

#[repr(C)]
struct LinkCreate {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// bpf(2) with an attribute block of type `A`; the descriptor it returns, or the error.
fn bpf<A>(cmd: i32, attr: &A) -> Result<i64, std::io::Error> {
    // The kernel reads up to its own `union bpf_attr` size and wants the rest zero: pass a
    // zeroed block of that size with `attr` at its start.
    let mut block = [0u8; 144];
    let n = std::mem::size_of::<A>().min(block.len());
    // SAFETY: copies the bytes of a plain #[repr(C)] value into a larger buffer.
    unsafe {
        std::ptr::copy_nonoverlapping((attr as *const A).cast::<u8>(), block.as_mut_ptr(), n)
    };
    // SAFETY: bpf(2) with a pointer to a live attribute block of the stated size.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, block.as_mut_ptr(), block.len() as u32) };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn owned(fd: i64) -> OwnedFd {
    // SAFETY: a descriptor bpf(2) just returned, owned by nothing else.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

/// Creates the XSKMAP (one entry per queue up to `queue`), loads the program for `ip` and
/// attaches it to interface `ifindex` in `attach` mode.
pub(crate) fn attach(
    ifname: &str,
    ifindex: u32,
    queue: u32,
    ip: Ipv4Addr,
    attach: XdpAttach,
) -> Result<Attached, XdpError> {
    let map = bpf(
        BPF_MAP_CREATE,
        &MapCreate {
            map_type: BPF_MAP_TYPE_XSKMAP,
            key_size: 4,
            value_size: 4,
            max_entries: queue + 1,
            map_flags: 0,
        },
    )
    .map_err(|e| XdpError::bpf("BPF_MAP_CREATE (XSKMAP)", e))?;
    let map = owned(map);
    let insns = listing(ip, map.as_raw_fd());
    let license = b"Apache-2.0\0";
    let mut log = vec![0u8; 16 * 1024];
    let mut name = [0u8; 16];
    name[..8].copy_from_slice(b"keel_xdp");
    let prog = bpf(
        BPF_PROG_LOAD,
        &ProgLoad {
            prog_type: BPF_PROG_TYPE_XDP,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            log_level: 1,
            log_size: log.len() as u32,
            log_buf: log.as_mut_ptr() as u64,
            kern_version: 0,
            prog_flags: 0,
            prog_name: name,
            prog_ifindex: 0,
            expected_attach_type: BPF_XDP,
        },
    )
    .map_err(|e| match e.raw_os_error() {
        Some(libc::EPERM) => XdpError::bpf("BPF_PROG_LOAD", e),
        _ => XdpError::Verifier {
            log: String::from_utf8_lossy(&log)
                .trim_end_matches('\0')
                .to_string(),
            source: e,
        },
    })?;
    let prog = owned(prog);
    let flags = match attach {
        XdpAttach::Native => XDP_FLAGS_DRV_MODE,
        XdpAttach::Generic => XDP_FLAGS_SKB_MODE,
    };
    let link = bpf(
        BPF_LINK_CREATE,
        &LinkCreate {
            prog_fd: prog.as_raw_fd() as u32,
            target_ifindex: ifindex,
            attach_type: BPF_XDP,
            flags,
        },
    )
    .map_err(|source| XdpError::AttachRefused {
        interface: ifname.to_string(),
        attach: attach.name(),
        source,
    })?;
    Ok(Attached {
        map,
        _prog: prog,
        _link: owned(link),
    })
}

impl Attached {
    /// Sends queue `queue`'s frames to the AF_XDP socket `xsk_fd`.
    pub fn register(&self, queue: u32, xsk_fd: RawFd) -> Result<(), XdpError> {
        let value = xsk_fd as u32;
        bpf(
            BPF_MAP_UPDATE_ELEM,
            &MapUpdate {
                map_fd: self.map.as_raw_fd() as u32,
                _pad: 0,
                key: std::ptr::addr_of!(queue) as u64,
                value: std::ptr::addr_of!(value) as u64,
                flags: 0,
            },
        )
        .map(|_| ())
        .map_err(|e| XdpError::bpf("BPF_MAP_UPDATE_ELEM (XSKMAP)", e))
    }
}
