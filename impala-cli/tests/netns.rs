//! Faults between hosts: remote env runners in network namespaces of their own, each joined to
//! the driver's by a veth pair, so a runner reaches the driver over a link that can be cut
//! (both ends set down: packets vanish, as with a pulled cable) rather than over loopback.
//! Needs root and iproute2's `ip`; without them these tests fail and say so.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::common::{runner_count, TestResult};
use crate::remote::{
    driver_on, free_port, kill_and_resume, last_result, output, result_lines, runner_at, wait,
    wait_for_iterations, TOKEN,
};
use crate::runs::signal;

/// Runner hosts: network namespace `i` (1-based) holds `10.NET.i.2`, the driver's side of its
/// link `10.NET.i.1`. Removed on drop.
struct Hosts {
    tag: &'static str,
    net: u8,
    count: usize,
}

impl Hosts {
    fn new(tag: &'static str, net: u8, count: usize) -> Result<Self, String> {
        let hosts = Hosts { tag, net, count };
        hosts.remove();
        for i in 1..=count {
            let (ns, link) = (hosts.netns(i), hosts.link(i));
            let (here, there) = (hosts.driver_ip(i), format!("10.{net}.{i}.2/24"));
            ip(&["netns", "add", &ns])?;
            ip(&["link", "add", &link, "type", "veth", "peer", "name", "eth0", "netns", &ns])?;
            ip(&["addr", "add", &format!("{here}/24"), "dev", &link])?;
            ip(&["link", "set", &link, "up"])?;
            ip(&["-n", &ns, "addr", "add", &there, "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(hosts)
    }

    fn netns(&self, i: usize) -> String {
        format!("impala-{}{i}", self.tag)
    }

    /// The driver's end of host `i`'s link (interface names have at most 15 bytes).
    fn link(&self, i: usize) -> String {
        format!("imp-{}{i}", self.tag)
    }

    fn driver_ip(&self, i: usize) -> String {
        format!("10.{}.{i}.1", self.net)
    }

    /// Starts runner `r{i}` on host `i`, connecting to the driver's `port` over its link.
    fn runner(&self, dir: &Path, i: usize, port: u16, extra: &[&str]) -> std::io::Result<Child> {
        let connect = format!("{}:{port}", self.driver_ip(i));
        runner_at(dir, &format!("r{i}"), &connect, Some(&self.netns(i)), extra)
    }

    /// Cuts (`false`) or restores host `i`'s link, at both ends.
    fn set_link(&self, i: usize, up: bool) -> Result<(), String> {
        let state = if up { "up" } else { "down" };
        ip(&["link", "set", &self.link(i), state])?;
        ip(&["-n", &self.netns(i), "link", "set", "eth0", state])
    }

    fn remove(&self) {
        for i in 1..=self.count {
            let _ = Command::new("ip").args(["netns", "del", &self.netns(i)]).output();
            let _ = Command::new("ip").args(["link", "del", &self.link(i)]).output();
        }
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        self.remove();
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let why = |what: String| {
        format!(
            "`ip {}` failed ({what}): these tests run env runners in network namespaces, which \
             needs root and iproute2's `ip`",
            args.join(" ")
        )
    };
    let out = Command::new("ip").args(args).output().map_err(|e| why(e.to_string()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(why(String::from_utf8_lossy(&out.stderr).trim().to_string()))
    }
}

/// The driver, serving every host's link, sampling with `runners` remote env runners that may
/// be silent for `timeout_s` seconds; it trains until stopped.
fn serve(
    dir: &Path,
    port: u16,
    runners: usize,
    timeout_s: u32,
) -> Result<std::process::Child, Box<dyn std::error::Error>> {
    let listen = format!("0.0.0.0:{port}");
    let (runners, timeout) =
        (format!("num_env_runners={runners}"), format!("sample_timeout_s={timeout_s}"));
    let args = ["--set", &runners, "--set", &timeout, "--stop-iters", "100000", "--seed", "3"];
    Ok(driver_on(dir, &listen, &args)?)
}

/// Waits until `check` holds for the newest result, or fails after `within`.
fn wait_for_result(
    dir: &Path,
    within: Duration,
    check: impl Fn(&serde_json::Value) -> bool,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let deadline = Instant::now() + within;
    loop {
        let last = last_result(dir).unwrap_or_default();
        if check(&last) {
            return Ok(last);
        }
        if Instant::now() > deadline {
            return Err(format!("not reached after {within:?}: {last}").into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Interrupts the driver (it saves and exits 130) and waits for every runner to exit.
fn finish(
    dir: &Path,
    driver: &mut std::process::Child,
    runners: &mut [std::process::Child],
) -> TestResult {
    signal(driver, "INT")?;
    wait(driver, Duration::from_secs(30))?;
    for runner in runners.iter_mut() {
        let _ = runner.kill();
        let _ = runner.wait();
    }
    assert!(!output(dir, "driver").contains(TOKEN), "the token leaked");
    Ok(())
}

#[test]
fn a_runner_host_cut_off_longer_than_sample_timeout_is_failed_and_replaced() -> TestResult {
    let hosts = Hosts::new("cut", 77, 3)?;
    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    let mut d = serve(dir.path(), port, 2, 4)?;
    let mut runners =
        vec![hosts.runner(dir.path(), 1, port, &[])?, hosts.runner(dir.path(), 2, port, &[])?];
    wait_for_iterations(dir.path(), 2, Duration::from_secs(60))?;
    // A spare on a third host takes the slot the cut-off runner leaves.
    runners.push(hosts.runner(dir.path(), 3, port, &[])?);
    let cut = last_result(dir.path())?;
    let steps_before = cut["num_env_steps_sampled"].as_f64().unwrap_or_default();
    hosts.set_link(1, false)?;
    let last = wait_for_result(dir.path(), Duration::from_secs(60), |r| {
        runner_count(r, "num_env_runner_restarts").is_ok_and(|n| n >= 1.0)
            && r["env_runners"]["num_healthy_env_runners"].as_f64() == Some(2.0)
            && r["num_env_steps_sampled"].as_f64().unwrap_or_default() > steps_before
    })?;
    hosts.set_link(1, true)?;
    let replaced = output(dir.path(), "r3");
    assert!(replaced.contains("incarnation=1"), "the spare never took the slot: {replaced}");
    // Training goes on with the replacement.
    let sampled = last["num_env_steps_sampled"].as_f64().unwrap_or_default();
    wait_for_result(dir.path(), Duration::from_secs(30), |r| {
        r["num_env_steps_sampled"].as_f64().unwrap_or_default() > sampled
    })?;
    finish(dir.path(), &mut d, &mut runners)?;
    let driver = output(dir.path(), "driver");
    assert!(driver.contains("sent nothing for 4 s"), "the driver says why: {driver}");
    Ok(())
}

#[test]
fn a_cut_shorter_than_sample_timeout_heals_with_nothing_lost_or_counted_twice() -> TestResult {
    let hosts = Hosts::new("blip", 78, 2)?;
    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    let mut d = serve(dir.path(), port, 2, 15)?;
    let mut runners =
        vec![hosts.runner(dir.path(), 1, port, &[])?, hosts.runner(dir.path(), 2, port, &[])?];
    wait_for_iterations(dir.path(), 2, Duration::from_secs(60))?;
    hosts.set_link(1, false)?;
    std::thread::sleep(Duration::from_secs(3));
    hosts.set_link(1, true)?;
    let healed = result_lines(&dir.path().join("run"))?.len();
    wait_for_iterations(dir.path(), healed + 8, Duration::from_secs(60))?;
    let last = last_result(dir.path())?;
    assert_eq!(runner_count(&last, "num_env_runner_restarts")?, 0.0, "{last}");
    assert_eq!(last["env_runners"]["num_healthy_env_runners"].as_f64(), Some(2.0), "{last}");
    // Every step is counted once: what the learner trained never exceeds what was sampled,
    // and the runner that was cut off never opened a second session.
    let sampled = last["num_env_steps_sampled"].as_f64().unwrap_or_default();
    let trained = last["num_env_steps_trained"].as_f64().unwrap_or_default();
    assert!(trained <= sampled && trained > 0.0, "{last}");
    finish(dir.path(), &mut d, &mut runners)?;
    let log = output(dir.path(), "r1");
    assert_eq!(log.matches("serving as env runner").count(), 1, "{log}");
    Ok(())
}

#[test]
fn runner_hosts_take_back_a_driver_resumed_on_the_same_address() -> TestResult {
    let hosts = Hosts::new("back", 79, 1)?;
    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    let listen = format!("0.0.0.0:{port}");
    let mut d =
        driver_on(dir.path(), &listen, &["--stop-iters", "100000", "--checkpoint-every", "1"])?;
    let mut r = hosts.runner(dir.path(), 1, port, &["--reconnect-timeout-s", "30"])?;
    wait_for_iterations(dir.path(), 3, Duration::from_secs(60))?;
    kill_and_resume(dir.path(), &mut d, &mut r, &listen)
}
