//! The AF_XDP transport's settings and refusals: what `[engine.af_xdp]` holds
//! ([`XdpConfig`], checked by [`XdpConfig::validate`]) and why the transport would not start
//! ([`XdpError`]). Plain data, apart from the transport's machinery, so that the shared
//! transport configuration (`net::ReactorConfig`) can carry it.

use std::net::Ipv4Addr;

/// Queues an interface may have (the XSKMAP has one entry per queue up to the one served).
pub const QUEUES_MAX: u32 = 4096;

/// An interface name, at most 15 bytes (the kernel's IFNAMSIZ less its NUL), kept inline so
/// the configuration stays `Copy`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct IfName {
    bytes: [u8; 15],
    len: u8,
}

impl IfName {
    /// The name, checked: 1 to 15 bytes, no `/`, whitespace, `:` or NUL.
    pub fn new(name: &str) -> Result<Self, XdpError> {
        let bad = name.is_empty()
            || name.len() > 15
            || name
                .bytes()
                .any(|b| b == b'/' || b == b':' || b == 0 || b.is_ascii_whitespace());
        if bad {
            return Err(XdpError::BadConfig {
                key: "interface",
                value: name.to_string(),
                why: "an interface name is 1 to 15 bytes without '/', ':' or spaces",
            });
        }
        let mut bytes = [0u8; 15];
        bytes[..name.len()].copy_from_slice(name.as_bytes());
        Ok(Self {
            bytes,
            len: name.len() as u8,
        })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("?")
    }
}

impl std::fmt::Debug for IfName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl std::fmt::Display for IfName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The AF_XDP transport's settings (`[engine.af_xdp]`, docs/config.md). The socket
/// transports ignore them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdpConfig {
    /// The interface the venue links leave by. Required.
    pub interface: Option<IfName>,
    /// Its receive queue the XDP program serves (steer the venue's flows there: with one
    /// queue, or `ethtool -N` flow rules). Default 0.
    pub queue: u32,
    /// keel's own IPv4 address and prefix length on that link (not the kernel's). Required.
    pub address: Option<(Ipv4Addr, u8)>,
    /// The next hop for destinations outside the prefix; `None`: on-link only.
    pub gateway: Option<Ipv4Addr>,
    /// keel's hardware address; `None`: the interface's.
    pub mac: Option<[u8; 6]>,
    /// UMEM frames (a power of two, 64 to 65,536): half receive, half transmit.
    pub frames: u32,
    /// Bytes per frame: 2048 or 4096, at least the interface's MTU plus its Ethernet header.
    pub frame_bytes: u32,
    /// Entries of each of the four rings (a power of two, at least `frames / 2`).
    pub ring_entries: u32,
    /// Copy or zero-copy. Zero-copy refused by the driver is an error, never a fallback.
    pub copy: XdpCopy,
    /// Native (driver) or generic XDP.
    pub attach: XdpAttach,
    /// Verify IPv4 and TCP checksums of received frames. Turn off only on veth (whose frames
    /// from the local kernel carry checksums it never finished) or behind a NIC that verified
    /// them.
    pub verify_checksums: bool,
    /// The local ports keel's connections take, first and last.
    pub local_ports: (u16, u16),
    /// Frames taken from the receive ring per pass at most (bounded work per pass).
    pub rx_batch: u32,
}

impl Default for XdpConfig {
    fn default() -> Self {
        Self {
            interface: None,
            queue: 0,
            address: None,
            gateway: None,
            mac: None,
            frames: 2048,
            frame_bytes: 2048,
            ring_entries: 1024,
            copy: XdpCopy::Copy,
            attach: XdpAttach::Native,
            verify_checksums: true,
            local_ports: (49_152, 65_535),
            rx_batch: 64,
        }
    }
}

/// Why the AF_XDP transport could not start (or, for `Sys`, went on), with the values.
#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    /// A required setting is missing.
    #[error("[engine.af_xdp] {key} is not set: the AF_XDP transport needs it")]
    NotConfigured {
        /// Which.
        key: &'static str,
    },
    /// A setting out of its range.
    #[error("[engine.af_xdp] {key} = {value}: {why}")]
    BadConfig {
        /// Which.
        key: &'static str,
        /// The value given.
        value: String,
        /// What it must be.
        why: &'static str,
    },
    /// No interface of that name in this network namespace.
    #[error("no interface '{name}' in this network namespace (ip link show)")]
    NoInterface {
        /// The name given.
        name: String,
    },
    /// The process lacks a capability.
    #[error("{call}: {source}: the AF_XDP transport needs {needs} (or root)")]
    Privilege {
        /// Which call was refused.
        call: &'static str,
        /// The capabilities it needs.
        needs: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// The UMEM does not fit the locked-memory limit.
    #[error(
        "a UMEM of {umem_bytes} bytes does not fit the locked-memory limit of {limit_bytes} \
         bytes (ulimit -l): raise it (LimitMEMLOCK=, tuning/limits.d/90-keel.conf), give the \
         process CAP_IPC_LOCK, or lower frames x frame_bytes"
    )]
    MemoryLock {
        /// The UMEM's size.
        umem_bytes: u64,
        /// RLIMIT_MEMLOCK.
        limit_bytes: u64,
    },
    /// Zero-copy asked for, refused by the driver.
    #[error(
        "zero-copy refused on queue {queue}: the driver has no AF_XDP zero-copy (veth, most \
         virtual NICs): set copy = \"copy\""
    )]
    ZeroCopyRefused {
        /// The queue.
        queue: u32,
    },
    /// The interface is not Ethernet (a tunnel, WireGuard, loopback): keel's program reads
    /// Ethernet frames.
    #[error("interface {name} is not an Ethernet interface (hardware type {hardware_type})")]
    NotEthernet {
        /// The interface.
        name: String,
        /// Its ARPHRD_ type.
        hardware_type: u16,
    },
    /// keel's address is one the kernel has on the interface: every frame to it would go to
    /// keel, the kernel's own traffic (SSH) included.
    #[error(
        "[engine.af_xdp] address {address} is the kernel's own on {interface}: keel needs an \
         address of its own there (the kernel keeps its address and its traffic)"
    )]
    KernelsAddress {
        /// The address.
        address: Ipv4Addr,
        /// The interface.
        interface: String,
    },
    /// The queue could not be bound (EINVAL: a queue the interface does not have).
    #[error("binding an AF_XDP socket to queue {queue}: {source} (a queue the interface does not have?)")]
    Bind {
        /// The queue.
        queue: u32,
        /// The error.
        source: std::io::Error,
    },
    /// Another AF_XDP socket is bound to the queue.
    #[error("queue {queue} already has an AF_XDP socket (another process): one per queue")]
    QueueBusy {
        /// The queue.
        queue: u32,
    },
    /// The XDP program could not be attached.
    #[error(
        "attaching keel's XDP program to {interface} ({attach} mode): {source} (EBUSY or \
         EEXIST: another XDP program is attached, `ip link set dev {interface} xdp off`; \
         EOPNOTSUPP in native mode: try attach = \"generic\"; EINVAL: a kernel older than 5.9 \
         (no XDP through BPF links), or no native XDP: try attach = \"generic\")"
    )]
    AttachRefused {
        /// The interface.
        interface: String,
        /// The mode asked for.
        attach: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// The kernel's verifier refused the program.
    #[error("the kernel refused keel's XDP program: {source}\n{log}")]
    Verifier {
        /// The verifier's log.
        log: String,
        /// The error.
        source: std::io::Error,
    },
    /// The kernel has no AF_XDP ring flags (older than 5.4).
    #[error("this kernel's AF_XDP is too old (ring flags appeared in Linux 5.4)")]
    KernelTooOld,
    /// Another system call failed.
    #[error("{call}: {source}")]
    Sys {
        /// Which call.
        call: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

impl XdpError {
    pub(super) fn sys(call: &'static str) -> Self {
        XdpError::Sys {
            call,
            source: std::io::Error::last_os_error(),
        }
    }

    pub(super) fn privileged(call: &'static str, needs: &'static str) -> Self {
        let source = std::io::Error::last_os_error();
        match source.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => XdpError::Privilege {
                call,
                needs,
                source,
            },
            _ => XdpError::Sys { call, source },
        }
    }

    pub(super) fn bpf(call: &'static str, source: std::io::Error) -> Self {
        match source.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => XdpError::Privilege {
                call,
                needs: "CAP_BPF and CAP_NET_ADMIN",
                source,
            },
            _ => XdpError::Sys { call, source },
        }
    }
}

/// Copy or zero-copy, as the socket is bound (`[engine.af_xdp] copy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpCopy {
    /// The kernel copies each frame between the driver's buffers and the UMEM: every driver.
    Copy,
    /// The NIC reads and writes the UMEM itself: drivers with AF_XDP zero-copy support only;
    /// refused (an error at start, never a silent fallback) elsewhere, veth included.
    ZeroCopy,
}

/// Where the program runs (`[engine.af_xdp] attach`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpAttach {
    /// In the driver, before any socket buffer is built (`XDP_FLAGS_DRV_MODE`): the fast
    /// path; every common NIC driver and veth have it.
    Native,
    /// After the kernel built its socket buffer (`XDP_FLAGS_SKB_MODE`): any interface, slower.
    Generic,
}

impl XdpAttach {
    /// The name operators write.
    pub fn name(self) -> &'static str {
        match self {
            XdpAttach::Native => "native",
            XdpAttach::Generic => "generic",
        }
    }
}

impl XdpConfig {
    /// Checks every setting against its range (the configuration file's reader and the
    /// transport's start both call it; a missing interface or address is the start's error).
    pub fn validate(&self) -> Result<(), XdpError> {
        let bad = |key, value: &dyn std::fmt::Display, why| {
            Err(XdpError::BadConfig {
                key,
                value: value.to_string(),
                why,
            })
        };
        if let Some((address, prefix)) = self.address {
            if prefix == 0 || prefix > 32 {
                return bad(
                    "address",
                    &format!("{address}/{prefix}"),
                    "a prefix length of 1 to 32",
                );
            }
            if address.is_unspecified() || address.is_broadcast() || address.is_multicast() {
                return bad(
                    "address",
                    &address,
                    "keel's address must be a unicast address",
                );
            }
        }
        if !self.frames.is_power_of_two() || !(64..=65_536).contains(&self.frames) {
            return bad("frames", &self.frames, "a power of two from 64 to 65536");
        }
        if self.frame_bytes != 2048 && self.frame_bytes != 4096 {
            return bad("frame_bytes", &self.frame_bytes, "2048 or 4096");
        }
        if !self.ring_entries.is_power_of_two()
            || self.ring_entries < self.frames / 2
            || self.ring_entries > 1 << 20
        {
            return bad(
                "ring_entries",
                &self.ring_entries,
                "a power of two up to 1048576, at least frames / 2 (the fill ring holds every \
                 receive frame)",
            );
        }
        if self.queue >= QUEUES_MAX {
            return bad(
                "queue",
                &self.queue,
                "a queue of the interface (below 4096)",
            );
        }
        if let (Some(gateway), Some((address, prefix))) = (self.gateway, self.address) {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            if u32::from(gateway) & mask != u32::from(address) & mask || gateway == address {
                return bad(
                    "gateway",
                    &gateway,
                    "a gateway inside keel's prefix, other than keel's address",
                );
            }
        }
        if let Some(mac) = self.mac {
            if mac[0] & 1 == 1 || mac == [0; 6] {
                let text = mac.map(|b| format!("{b:02x}")).join(":");
                return bad(
                    "mac",
                    &text,
                    "a unicast hardware address (first byte even), not zero",
                );
            }
        }
        let (first, last) = self.local_ports;
        if first == 0 || first > last {
            return bad("local_port_first", &first, "1 to local_port_last");
        }
        if self.rx_batch == 0 || self.rx_batch > self.ring_entries {
            return bad("rx_batch", &self.rx_batch, "1 to ring_entries");
        }
        Ok(())
    }
}
