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
