//! The AF_XDP socket as the kernel defines it (`linux/if_xdp.h`): the UMEM (one anonymous
//! mapping of equal frames, registered with the socket), its fill and completion rings, the
//! socket's receive and transmit rings, and the interface facts the transport needs (index,
//! hardware address, MTU). Every ring is a single-producer single-consumer ring shared with
//! the kernel: this side caches the other side's index and publishes its own after each
//! descriptor. Nothing here allocates after [`Xsk::open`].

#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

use super::{XdpCopy, XdpError};

/// The address family of AF_XDP sockets.
const AF_XDP: i32 = 44;
/// The socket option level of AF_XDP.
const SOL_XDP: i32 = 283;
const XDP_MMAP_OFFSETS: i32 = 1;
const XDP_RX_RING: i32 = 2;
const XDP_TX_RING: i32 = 3;
const XDP_UMEM_REG: i32 = 4;
const XDP_UMEM_FILL_RING: i32 = 5;
const XDP_UMEM_COMPLETION_RING: i32 = 6;
const XDP_STATISTICS: i32 = 7;
const PGOFF_RX_RING: i64 = 0;
const PGOFF_TX_RING: i64 = 0x8000_0000;
const PGOFF_FILL_RING: i64 = 0x1_0000_0000;
const PGOFF_COMPLETION_RING: i64 = 0x1_8000_0000;
/// Bind flags.
const XDP_COPY: u16 = 1 << 1;
const XDP_ZEROCOPY: u16 = 1 << 2;
const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
/// A ring's flag: the kernel needs a system call to go on with it.
const XDP_RING_NEED_WAKEUP: u32 = 1;
/// Send cues per pass at most (bounded work per pass).
const KICKS_PER_PASS: u32 = 8;

#[repr(C)]
struct UmemReg {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
    flags: u32,
    tx_metadata_len: u32,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct RingOffset {
    producer: u64,
    consumer: u64,
    desc: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct MmapOffsets {
    rx: RingOffset,
    tx: RingOffset,
    fill: RingOffset,
    completion: RingOffset,
}

#[repr(C)]
struct SockaddrXdp {
    family: u16,
    flags: u16,
    ifindex: u32,
    queue_id: u32,
    shared_umem_fd: u32,
}

/// A frame on the receive or transmit ring: where in the UMEM, how long.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Desc {
    pub addr: u64,
    pub len: u32,
    pub options: u32,
}

/// The kernel's counters of one AF_XDP socket (`XDP_STATISTICS`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct XskKernelStats {
    /// Frames dropped for reasons other than a bad descriptor.
    pub rx_dropped: u64,
    /// Receive descriptors the kernel found invalid.
    pub rx_invalid_descs: u64,
    /// Transmit descriptors the kernel found invalid.
    pub tx_invalid_descs: u64,
    /// Frames dropped because the receive ring was full (the loop did not read fast enough).
    pub rx_ring_full: u64,
    /// Times the fill ring was empty when a frame arrived (no frame to receive into).
    pub rx_fill_ring_empty_descs: u64,
    /// Times the kernel found the transmit ring empty when asked to send.
    pub tx_ring_empty_descs: u64,
}

/// One mapped ring shared with the kernel, of `D` descriptors.
struct Ring<D: Copy> {
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    descs: *mut D,
    mask: u32,
    /// This side's own index (producer or consumer), published by `publish`/`release`.
    local: u32,
    /// The other side's index as last read.
    cached: u32,
    map: *mut libc::c_void,
    map_len: usize,
}

impl<D: Copy> Ring<D> {
    /// Maps the ring of `entries` descriptors at the kernel's offsets `off` (`pgoff` names
    /// which ring).
    fn map(fd: RawFd, off: RingOffset, entries: u32, pgoff: i64) -> Result<Self, XdpError> {
        let map_len = off.desc as usize + entries as usize * std::mem::size_of::<D>();
        // SAFETY: mmap of the socket's ring at the offset the kernel defines for it; the result
        // is checked before use and unmapped in Drop.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(XdpError::sys("mmap of an AF_XDP ring"));
        }
        let at = |o: u64| map.cast::<u8>().wrapping_add(o as usize);
        Ok(Self {
            producer: at(off.producer).cast(),
            consumer: at(off.consumer).cast(),
            flags: at(off.flags).cast(),
            descs: at(off.desc).cast(),
            mask: entries - 1,
            local: 0,
            cached: 0,
            map,
            map_len,
        })
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: the index lies in the live mapping, aligned by the kernel, shared with it as
        // an atomic.
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { &*self.consumer }
    }

    fn needs_wakeup(&self) -> bool {
        // SAFETY: as for `producer`.
        unsafe { &*self.flags }.load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }

    // --- this side produces (fill, transmit) ---

    /// Writes one descriptor if there is room (not yet visible to the kernel).
    fn push(&mut self, d: D) -> bool {
        let size = self.mask + 1;
        if self.local.wrapping_sub(self.cached) == size {
            self.cached = self.consumer().load(Ordering::Acquire);
            if self.local.wrapping_sub(self.cached) == size {
                return false;
            }
        }
        // SAFETY: the index is masked into the ring's `mask + 1` descriptors, and the kernel
        // has consumed that entry (checked above).
        unsafe { self.descs.add((self.local & self.mask) as usize).write(d) };
        self.local = self.local.wrapping_add(1);
        true
    }

    /// Makes the pushed descriptors visible to the kernel.
    fn publish(&mut self) {
        self.producer().store(self.local, Ordering::Release);
    }

    // --- this side consumes (receive, completion) ---

    /// Takes one descriptor the kernel produced, if any.
    fn pop(&mut self) -> Option<D> {
        if self.local == self.cached {
            self.cached = self.producer().load(Ordering::Acquire);
            if self.local == self.cached {
                return None;
            }
        }
        // SAFETY: masked index into the ring; the kernel published this entry (Acquire above).
        let d = unsafe { self.descs.add((self.local & self.mask) as usize).read() };
        self.local = self.local.wrapping_add(1);
        Some(d)
    }

    /// Hands the taken entries back to the kernel.
    fn release(&mut self) {
        self.consumer().store(self.local, Ordering::Release);
    }
}

impl<D: Copy> Drop for Ring<D> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}

/// The receive half: frames in from the kernel, back to it through the fill ring.
pub(crate) struct RxHalf {
    rx: Ring<Desc>,
    fill: Ring<u64>,
    umem: *mut u8,
    frame_mask: u64,
    /// Frames taken from the receive ring this pass.
    pub frames: u64,
}

/// The transmit half: free frames, the transmit ring and its completions.
pub(crate) struct TxHalf {
    tx: Ring<Desc>,
    completion: Ring<u64>,
    umem: *mut u8,
    frame_bytes: u32,
    /// Frames this side may write (preallocated to their number; never grows).
    free: Vec<u64>,
    /// Transmit frames in all.
    frames_total: usize,
    /// Descriptors pushed and not yet announced with a wake-up.
    pub queued: u32,
    /// Frames sent.
    pub frames: u64,
    /// Frames smoltcp asked for when none was free: dropped (TCP sends them again).
    pub dropped: u64,
}

/// An AF_XDP socket bound to one queue of one interface, its UMEM and its four rings.
pub(crate) struct Xsk {
    pub rx: RxHalf,
    pub tx: TxHalf,
    umem: Umem,
    need_wakeup: bool,
    fd: OwnedFd,
}

// SAFETY: the raw pointers name the socket's own mappings, owned by this value and used only
// by the thread that owns it.
unsafe impl Send for Xsk {}

impl std::fmt::Debug for Xsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Xsk")
            .field("fd", &self.fd.as_raw_fd())
            .field("umem_len", &self.umem.len)
            .finish_non_exhaustive()
    }
}

/// What `Xsk::open` needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct XskParams {
    pub ifindex: u32,
    pub queue: u32,
    pub frames: u32,
    pub frame_bytes: u32,
    pub ring_entries: u32,
    pub copy: XdpCopy,
}

impl Xsk {
    /// Creates the socket, maps and registers the UMEM, maps the rings, binds to the queue and
    /// gives half the frames to the fill ring (the other half transmit).
    pub fn open(p: XskParams) -> Result<Self, XdpError> {
        // SAFETY: plain socket(2); the result is checked before it is owned.
        let raw = unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(XdpError::privileged("socket(AF_XDP)", "CAP_NET_RAW"));
        }
        // SAFETY: fd just created and owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let umem_len = p.frames as usize * p.frame_bytes as usize;
        // SAFETY: an anonymous private mapping; checked below, unmapped in Drop.
        let umem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                umem_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if umem == libc::MAP_FAILED {
            return Err(XdpError::sys("mmap of the UMEM"));
        }
        let umem = Umem {
            ptr: umem.cast::<u8>(),
            len: umem_len,
        };
        let mut xsk = Self::mapped(fd, umem, p)?;
        xsk.bind(p)?;
        for i in 0..p.frames / 2 {
            let pushed = xsk.rx.fill.push(u64::from(i) * u64::from(p.frame_bytes));
            debug_assert!(pushed, "the fill ring holds half the frames");
        }
        xsk.rx.fill.publish();
        Ok(xsk)
    }

    /// Registers the UMEM and maps the four rings.
    fn mapped(fd: OwnedFd, umem: Umem, p: XskParams) -> Result<Self, XdpError> {
        let (umem_ptr, umem_len) = (umem.ptr, umem.len);
        let raw = fd.as_raw_fd();
        let reg = UmemReg {
            addr: umem_ptr as u64,
            len: umem_len as u64,
            chunk_size: p.frame_bytes,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        if let Err(e) = set_option(raw, XDP_UMEM_REG, &reg) {
            return Err(match e.raw_os_error() {
                Some(libc::ENOBUFS | libc::ENOMEM | libc::EPERM) => XdpError::MemoryLock {
                    umem_bytes: umem_len as u64,
                    limit_bytes: memlock_limit(),
                },
                _ => XdpError::Sys {
                    call: "setsockopt(XDP_UMEM_REG)",
                    source: e,
                },
            });
        }
        let n = p.ring_entries;
        for (option, name) in [
            (XDP_UMEM_FILL_RING, "setsockopt(XDP_UMEM_FILL_RING)"),
            (
                XDP_UMEM_COMPLETION_RING,
                "setsockopt(XDP_UMEM_COMPLETION_RING)",
            ),
            (XDP_RX_RING, "setsockopt(XDP_RX_RING)"),
            (XDP_TX_RING, "setsockopt(XDP_TX_RING)"),
        ] {
            set_option(raw, option, &n).map_err(|source| XdpError::Sys { call: name, source })?;
        }
        let off = mmap_offsets(raw)?;
        let frame_mask = !(u64::from(p.frame_bytes) - 1);
        let frames_tx = p.frames - p.frames / 2;
        let mut free = Vec::with_capacity(frames_tx as usize);
        free.extend(
            (p.frames / 2..p.frames)
                .rev()
                .map(|i| u64::from(i) * u64::from(p.frame_bytes)),
        );
        Ok(Self {
            rx: RxHalf {
                rx: Ring::map(raw, off.rx, n, PGOFF_RX_RING)?,
                fill: Ring::map(raw, off.fill, n, PGOFF_FILL_RING)?,
                umem: umem_ptr,
                frame_mask,
                frames: 0,
            },
            tx: TxHalf {
                tx: Ring::map(raw, off.tx, n, PGOFF_TX_RING)?,
                completion: Ring::map(raw, off.completion, n, PGOFF_COMPLETION_RING)?,
                umem: umem_ptr,
                frame_bytes: p.frame_bytes,
                frames_total: free.len(),
                free,
                queued: 0,
                frames: 0,
                dropped: 0,
            },
            umem,
            need_wakeup: false,
            fd,
        })
    }

    /// Binds to the queue, with the wake-up flag when the kernel has it.
    fn bind(&mut self, p: XskParams) -> Result<(), XdpError> {
        let mode = match p.copy {
            XdpCopy::Copy => XDP_COPY,
            XdpCopy::ZeroCopy => XDP_ZEROCOPY,
        };
        let mut result: Result<(), std::io::Error> =
            Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        for wakeup in [XDP_USE_NEED_WAKEUP, 0] {
            let addr = SockaddrXdp {
                family: AF_XDP as u16,
                flags: mode | wakeup,
                ifindex: p.ifindex,
                queue_id: p.queue,
                shared_umem_fd: 0,
            };
            // SAFETY: bind(2) with a sockaddr_xdp of the stated size.
            let rc = unsafe {
                libc::bind(
                    self.fd.as_raw_fd(),
                    std::ptr::addr_of!(addr).cast(),
                    std::mem::size_of::<SockaddrXdp>() as u32,
                )
            };
            if rc == 0 {
                self.need_wakeup = wakeup != 0;
                return Ok(());
            }
            result = Err(std::io::Error::last_os_error());
            if result.as_ref().err().and_then(std::io::Error::raw_os_error) != Some(libc::EINVAL) {
                break;
            }
        }
        let source = result.expect_err("bind failed");
        Err(match (p.copy, source.raw_os_error()) {
            (XdpCopy::ZeroCopy, Some(libc::EOPNOTSUPP | libc::EPROTONOSUPPORT)) => {
                XdpError::ZeroCopyRefused { queue: p.queue }
            }
            (_, Some(libc::EBUSY)) => XdpError::QueueBusy { queue: p.queue },
            (_, Some(libc::EINVAL)) => XdpError::Bind {
                queue: p.queue,
                source,
            },
            _ => XdpError::Sys {
                call: "bind(AF_XDP)",
                source,
            },
        })
    }

    /// The socket's descriptor (for the XSKMAP and for waiting).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Frames whose transmission completed go back to the free list.
    pub fn reclaim(&mut self) {
        let tx = &mut self.tx;
        let mut n = 0;
        while let Some(addr) = tx.completion.pop() {
            if tx.free.len() < tx.frames_total {
                tx.free.push(addr);
            }
            n += 1;
        }
        if n > 0 {
            tx.completion.release();
        }
    }

    /// Tells the kernel there is something to send, when it needs telling; returns the system
    /// calls made. In copy mode one call sends a batch of frames (32 in Linux), so it is
    /// repeated while frames wait, up to `KICKS_PER_PASS`. A busy device (EAGAIN, EBUSY,
    /// ENOBUFS, ENETDOWN while a link renegotiates) is tried again next pass; the frames stay
    /// on the ring.
    pub fn kick(&mut self) -> Result<u32, XdpError> {
        let mut calls = 0;
        while self.tx.queued > 0 && calls < KICKS_PER_PASS {
            if self.need_wakeup && !self.tx.tx.needs_wakeup() {
                self.tx.queued = 0;
                break;
            }
            calls += 1;
            // SAFETY: sendto(2) with no data on the socket: the kernel's cue to send the ring.
            let rc = unsafe {
                libc::sendto(
                    self.fd(),
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            };
            if rc < 0 {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN | libc::EBUSY | libc::EINTR) => continue,
                    Some(libc::ENOBUFS | libc::ENETDOWN) => break,
                    _ => {
                        return Err(XdpError::Sys {
                            call: "sendto(AF_XDP)",
                            source: e,
                        })
                    }
                }
            }
            // Frames the kernel has not taken from the ring yet are still queued.
            let taken = self.tx.tx.consumer().load(Ordering::Acquire);
            self.tx.queued = self.tx.tx.local.wrapping_sub(taken);
        }
        Ok(calls)
    }

    /// Wakes the kernel for the fill ring when it asks (zero-copy drivers).
    pub fn wake_fill(&mut self) -> bool {
        if !(self.need_wakeup && self.rx.fill.needs_wakeup()) {
            return false;
        }
        // SAFETY: recvfrom(2) with no buffer: the kernel's cue to refill from the fill ring.
        unsafe {
            libc::recvfrom(
                self.fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        true
    }

    /// Whether a frame waits on the receive ring (no system call).
    pub fn rx_ready(&mut self) -> bool {
        let rx = &mut self.rx.rx;
        if rx.local != rx.cached {
            return true;
        }
        rx.cached = rx.producer().load(Ordering::Acquire);
        rx.local != rx.cached
    }

    /// The kernel's counters for this socket.
    pub fn kernel_stats(&self) -> XskKernelStats {
        let mut s = XskKernelStats::default();
        let mut len = std::mem::size_of::<XskKernelStats>() as libc::socklen_t;
        // SAFETY: getsockopt into a buffer of the stated size; an older kernel fills less.
        unsafe {
            libc::getsockopt(
                self.fd(),
                SOL_XDP,
                XDP_STATISTICS,
                std::ptr::addr_of_mut!(s).cast(),
                &mut len,
            )
        };
        s
    }
}

/// The UMEM mapping, unmapped when dropped (on every error path of `Xsk::open` too). The
/// kernel holds its own reference to the pages while the socket lives, so dropping it before
/// the socket (field order in `Xsk`) is sound.
struct Umem {
    ptr: *mut u8,
    len: usize,
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: the anonymous mapping made in `Xsk::open`, unmapped once; the rings and the
        // halves only hold copies of its address and are dropped with the same `Xsk`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

impl RxHalf {
    /// The next received frame, if any: its UMEM address and bytes.
    pub fn next(&mut self) -> Option<Desc> {
        let d = self.rx.pop()?;
        self.rx.release();
        self.frames += 1;
        Some(d)
    }

    /// The bytes of a received frame.
    pub fn bytes(&self, d: Desc) -> &[u8] {
        // SAFETY: the kernel wrote `len` bytes at `addr` inside the UMEM (it checks both against
        // the registration), and this side does not write a frame it received.
        unsafe { std::slice::from_raw_parts(self.umem.add(d.addr as usize), d.len as usize) }
    }

    /// Gives a received frame back to the kernel to receive into.
    pub fn recycle(&mut self, d: Desc) {
        // The fill ring holds every receive frame, so there is always room.
        let pushed = self.fill.push(d.addr & self.frame_mask);
        debug_assert!(pushed, "fill ring sized for every receive frame");
        self.fill.publish();
    }
}

impl TxHalf {
    /// Writes one frame of `len` bytes with `f` and queues it, or drops it (counted) when no
    /// frame beyond `reserve` or no ring entry is free (the frame is written to `scratch`,
    /// which holds a whole frame: the device's MTU is at most a frame).
    pub fn send<R>(
        &mut self,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
        scratch: &mut [u8],
        reserve: usize,
    ) -> R {
        let fits = len <= self.frame_bytes as usize;
        let Some(addr) = (fits && self.free.len() > reserve)
            .then(|| self.free.pop())
            .flatten()
        else {
            self.dropped += 1;
            let n = len.min(scratch.len());
            return f(&mut scratch[..n]);
        };
        // SAFETY: `addr` is a free transmit frame inside the UMEM (it came from this list or
        // the completion ring), `len` fits in it, and the kernel is not reading it.
        let buf = unsafe { std::slice::from_raw_parts_mut(self.umem.add(addr as usize), len) };
        let r = f(buf);
        if self.tx.push(Desc {
            addr,
            len: len as u32,
            options: 0,
        }) {
            self.tx.publish();
            self.queued += 1;
            self.frames += 1;
        } else {
            self.free.push(addr);
            self.dropped += 1;
        }
        r
    }

    /// Frames free to write.
    pub fn free_frames(&self) -> usize {
        self.free.len()
    }

    /// Transmit frames in all.
    pub fn frames_total(&self) -> usize {
        self.frames_total
    }
}

fn set_option<T>(fd: RawFd, option: i32, value: &T) -> Result<(), std::io::Error> {
    // SAFETY: setsockopt with a pointer to a live value of the stated size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            SOL_XDP,
            option,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn mmap_offsets(fd: RawFd) -> Result<MmapOffsets, XdpError> {
    let mut off = MmapOffsets::default();
    let mut len = std::mem::size_of::<MmapOffsets>() as libc::socklen_t;
    // SAFETY: getsockopt into a buffer of the stated size.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            SOL_XDP,
            XDP_MMAP_OFFSETS,
            std::ptr::addr_of_mut!(off).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(XdpError::sys("getsockopt(XDP_MMAP_OFFSETS)"));
    }
    if (len as usize) < std::mem::size_of::<MmapOffsets>() {
        // A kernel older than 5.4 has no ring flags (and no wake-up): not supported.
        return Err(XdpError::KernelTooOld);
    }
    Ok(off)
}

/// The locked-memory limit of this process (RLIMIT_MEMLOCK), bytes; `u64::MAX` unlimited.
pub(crate) fn memlock_limit() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit into a live struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } != 0 {
        return 0;
    }
    if r.rlim_cur == libc::RLIM_INFINITY {
        u64::MAX
    } else {
        r.rlim_cur
    }
}

/// What the transport needs to know of its interface.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InterfaceFacts {
    pub index: u32,
    pub mac: [u8; 6],
    pub mtu: u32,
}

/// Looks the interface up by name in this thread's network namespace.
pub(crate) fn interface(name: &str) -> Result<InterfaceFacts, XdpError> {
    let missing = || XdpError::NoInterface {
        name: name.to_string(),
    };
    let c = CString::new(name).map_err(|_| missing())?;
    // SAFETY: a NUL-terminated name.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if index == 0 {
        return Err(missing());
    }
    // SAFETY: a throwaway datagram socket for the interface ioctls; checked and owned.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(XdpError::sys("socket(AF_INET) for interface ioctls"));
    }
    // SAFETY: just created.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: ifreq is plain data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    // SAFETY: SIOCGIFHWADDR fills the ifreq's union with a sockaddr.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) } != 0 {
        return Err(XdpError::sys("ioctl(SIOCGIFHWADDR)"));
    }
    // SAFETY: the union holds the hardware address just written.
    let (family, data) = unsafe {
        (
            req.ifr_ifru.ifru_hwaddr.sa_family,
            req.ifr_ifru.ifru_hwaddr.sa_data,
        )
    };
    if family != libc::ARPHRD_ETHER {
        return Err(XdpError::NotEthernet {
            name: name.to_string(),
            hardware_type: family,
        });
    }
    let mut mac = [0u8; 6];
    for (m, d) in mac.iter_mut().zip(data.iter()) {
        *m = *d as u8;
    }
    // SAFETY: SIOCGIFMTU fills the union's mtu.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &mut req) } != 0 {
        return Err(XdpError::sys("ioctl(SIOCGIFMTU)"));
    }
    // SAFETY: the union holds the MTU just written.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu }.max(0) as u32;
    Ok(InterfaceFacts { index, mac, mtu })
}

/// Whether the kernel has `address` on interface `name` (this thread's namespace).
pub(crate) fn kernel_has_address(name: &str, address: std::net::Ipv4Addr) -> bool {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list freed below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return false;
    }
    let mut found = false;
    let mut at = list;
    while !at.is_null() {
        // SAFETY: a node of the list getifaddrs returned, alive until freeifaddrs.
        let node = unsafe { &*at };
        // SAFETY: ifa_name is a NUL-terminated string of the node.
        let node_name = unsafe { std::ffi::CStr::from_ptr(node.ifa_name) };
        let addr = node.ifa_addr;
        // SAFETY: a non-null ifa_addr points to a sockaddr whose family says its type.
        if !addr.is_null() && unsafe { (*addr).sa_family } == libc::AF_INET as libc::sa_family_t {
            // SAFETY: an AF_INET sockaddr is a sockaddr_in.
            let v4 = unsafe { &*addr.cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr));
            found |= node_name.to_bytes() == name.as_bytes() && ip == address;
        }
        at = node.ifa_next;
    }
    // SAFETY: the list getifaddrs returned, freed once.
    unsafe { libc::freeifaddrs(list) };
    found
}
