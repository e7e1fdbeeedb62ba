//! The Rust example app: leaks on purpose in `leaky_function`, for memprofile's
//! way 2 (rebuild dynamically). Usage: leaky-rs [SECONDS] [BYTES_PER_TICK].
use std::time::{Duration, Instant};

#[inline(never)]
fn leaky_function(kept: &mut Vec<Vec<u8>>, size: usize) {
    kept.push(vec![0xab; size]);
}

#[inline(never)]
fn temporary_work(size: usize) -> usize {
    let v = vec![1u8; size];
    v.iter().map(|&b| b as usize).sum()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seconds: f64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(0.0);
    let per_tick: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(256 * 1024);
    let start = Instant::now();
    let mut kept = Vec::new();
    let mut work = 0;
    loop {
        leaky_function(&mut kept, per_tick);
        work += temporary_work(per_tick * 2);
        if seconds > 0.0 && start.elapsed().as_secs_f64() >= seconds {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("leaky-rs: leaked {} bytes in leaky_function ({})", kept.len() * per_tick, work % 7);
    // Never dropped: still live when the process exits, where profilers that
    // dump at exit (jemalloc's prof_final) look.
    std::mem::forget(kept);
}
