//! What the machine has, for checks that refuse settings it cannot hold.

/// The machine's memory in bytes (`MemTotal` of `/proc/meminfo`), where the OS says.
///
/// ```
/// if let Some(bytes) = impala_core::machine_memory_bytes() {
///     assert!(bytes > 0);
/// }
/// ```
pub fn machine_memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// `bytes` in GiB, for messages.
pub fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// How many more threads the machine can start: the smaller of the kernel's limits
/// (`kernel.threads-max`, `kernel.pid_max`: every thread takes a pid) less the threads running
/// now (`/proc/loadavg`), with the limit's name for messages; `None` where the OS does not say.
///
/// ```
/// if let Some(room) = impala_core::machine_thread_room() {
///     assert!(room.limit >= room.in_use);
/// }
/// ```
pub fn machine_thread_room() -> Option<ThreadRoom> {
    let read = |path: &str| std::fs::read_to_string(path).ok()?.trim().parse::<u64>().ok();
    let limits = [
        ("kernel.threads-max", read("/proc/sys/kernel/threads-max")),
        ("kernel.pid_max", read("/proc/sys/kernel/pid_max")),
    ];
    let (name, limit) =
        limits.into_iter().filter_map(|(name, v)| Some((name, v?))).min_by_key(|(_, v)| *v)?;
    // The fourth field is `running/total` scheduling entities.
    let loadavg = std::fs::read_to_string("/proc/loadavg").ok()?;
    let in_use = loadavg.split_whitespace().nth(3)?.split_once('/')?.1.parse().ok()?;
    Some(ThreadRoom { limit, limit_name: name, in_use })
}

/// The machine's thread limit and use ([`machine_thread_room`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadRoom {
    /// The smallest limit on the machine's threads.
    pub limit: u64,
    /// Its sysctl name.
    pub limit_name: &'static str,
    /// Threads running now, in every process.
    pub in_use: u64,
}

impl ThreadRoom {
    /// Threads that can still start.
    pub fn free(&self) -> u64 {
        self.limit.saturating_sub(self.in_use)
    }
}
