//! The CPU time the lab cloud's control plane spends, read from `/proc`: how much work a
//! link's build asks of Neutron, its database and OVN, apart from how long it takes. On a
//! machine whose cores that work saturates, a build cannot finish in less than its CPU time
//! over the core count, however its calls are ordered (docs/performance.md, "Packets: apply
//! to first packet, break to first packet again (ML2/OVN)").
//!
//! Counted: every daemon the lab records a pid file for under `$LAB_DIR/run` and
//! `$LAB_DIR/ovn/run` (Keystone, MariaDB, the Neutrons and their workers, the OVN databases,
//! northd, ovn-controller), each with its direct children (gunicorn's workers, the OVN
//! maintenance worker). Left out: ovs-vswitchd, the datapath, which also forwards the probe
//! stream a measurement sends, and the TLS proxies in front of the servers.

use std::collections::BTreeMap;
use std::path::Path;

/// Linux reports process times in clock ticks of `USER_HZ`, 100 on every architecture the
/// lab runs on.
const TICKS_PER_SECOND: u64 = 100;

/// The lab's control-plane processes, found once.
pub struct CloudCpu {
    pids: Vec<u32>,
}

impl CloudCpu {
    /// The processes of the lab `lab.env` describes; `None` when it records no pid file this
    /// machine can read (a lab on another host).
    pub fn of_lab(lab: &BTreeMap<String, String>) -> Option<Self> {
        let dir = lab.get("LAB_DIR")?;
        let mut roots = vec![];
        for sub in ["run", "ovn/run"] {
            let Ok(entries) = std::fs::read_dir(Path::new(dir).join(sub)) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if !name.ends_with(".pid") || name.starts_with("tls-") || name == "ovs-vswitchd.pid"
                {
                    continue;
                }
                if let Some(pid) = std::fs::read_to_string(e.path())
                    .ok()
                    .and_then(|s| s.trim().parse::<u32>().ok())
                    .filter(|p| Path::new(&format!("/proc/{p}")).exists())
                {
                    roots.push(pid);
                }
            }
        }
        if roots.is_empty() {
            return None;
        }
        let mut pids = roots.clone();
        pids.extend(children_of(&roots));
        pids.sort_unstable();
        pids.dedup();
        Some(Self { pids })
    }

    /// CPU time (user and system) the processes have used so far, in milliseconds. A process
    /// gone since `of_lab` counts nothing.
    pub fn used_ms(&self) -> u64 {
        self.pids.iter().filter_map(|p| ticks(*p)).sum::<u64>() * 1000 / TICKS_PER_SECOND
    }
}

/// The fields of `/proc/<pid>/stat` after the command name (field 2, which may hold spaces,
/// so the split starts at its closing parenthesis): the state is the first.
fn stat_after_command(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// `utime + stime` of `pid` (fields 14 and 15 of its stat).
fn ticks(pid: u32) -> Option<u64> {
    let fields = stat_after_command(pid)?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// The pids whose parent (field 4 of their stat) is one of `parents`.
fn children_of(parents: &[u32]) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            stat_after_command(*pid)
                .and_then(|f| f.get(1)?.parse::<u32>().ok())
                .is_some_and(|ppid| parents.contains(&ppid))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_uses_cpu_and_its_ticks_are_read() {
        let me = std::process::id();
        let before = ticks(me).expect("own stat");
        // Burn a little CPU so the count must move.
        let mut x = 0u64;
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(120) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        let after = ticks(me).expect("own stat");
        assert!(
            after > before,
            "{before} -> {after} ticks after 120 ms of work"
        );
    }

    #[test]
    fn no_pid_files_is_no_lab() {
        let dir = std::env::temp_dir().join(format!("cloud-cpu-empty-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("run")).expect("dir");
        let lab = BTreeMap::from([("LAB_DIR".to_string(), dir.display().to_string())]);
        assert!(CloudCpu::of_lab(&lab).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
