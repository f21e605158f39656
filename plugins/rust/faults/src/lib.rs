//! Plugins that misbehave on purpose, for self-healing and limit tests.
//! Built for wasm32-wasip1, so `std::process::exit` is WASI `proc_exit`.

use extism_pdk::*;

#[inline(never)]
fn explode_on_purpose(input: &str) -> ! {
    panic!("deliberate panic on {input:?}")
}

/// Always traps (a Rust panic is a wasm `unreachable`).
#[plugin_fn]
pub fn trap(input: String) -> FnResult<()> {
    explode_on_purpose(&input)
}

/// Input n: traps when n % 10 == 0, else outputs "ok n".
#[plugin_fn]
pub fn trap_sometimes(input: String) -> FnResult<String> {
    let n: u64 = input.trim().parse()?;
    if n % 10 == 0 {
        explode_on_purpose(&input)
    }
    Ok(format!("ok {n}"))
}

/// Never returns.
#[plugin_fn]
pub fn spin() -> FnResult<()> {
    let mut x = 0u64;
    loop {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}

/// Allocates 1 MiB blocks, keeping them, until memory runs out.
#[plugin_fn]
pub fn grow() -> FnResult<()> {
    let mut kept: Vec<Vec<u8>> = Vec::new();
    loop {
        kept.push(vec![1u8; 1 << 20]);
        std::hint::black_box(&kept);
    }
}

/// Busy-waits n milliseconds (WASI clock), then outputs "slept".
#[plugin_fn]
pub fn sleep_ms(input: String) -> FnResult<String> {
    let ms: u64 = input.trim().parse()?;
    let start = std::time::Instant::now();
    while start.elapsed().as_millis() < ms as u128 {
        std::hint::black_box(());
    }
    Ok("slept".to_string())
}

/// Calls proc_exit(3).
#[plugin_fn]
pub fn exit_three() -> FnResult<()> {
    std::process::exit(3)
}

/// Sets the output, then calls proc_exit(0).
#[plugin_fn]
pub fn exit_zero() -> FnResult<()> {
    output("bye")?;
    std::process::exit(0)
}

/// Prints the input to stdout and stderr; outputs "printed".
#[plugin_fn]
pub fn stdout(input: String) -> FnResult<String> {
    println!("to stdout: {input}");
    eprintln!("to stderr: {input}");
    Ok("printed".to_string())
}

/// Input: a path. Outputs the file's contents (WASI filesystem; only what
/// `allowed_paths` preopens is reachable).
#[plugin_fn]
pub fn read_file(path: String) -> FnResult<String> {
    Ok(std::fs::read_to_string(path)?)
}

/// Input: `path=content`. Writes the file; outputs "written".
#[plugin_fn]
pub fn write_file(input: String) -> FnResult<String> {
    let (path, content) = input.split_once('=').ok_or_else(|| Error::msg("expected path=content"))?;
    std::fs::write(path, content)?;
    Ok("written".to_string())
}
