//! The `capstan` binary: parse arguments, run the command, map the result to an exit code.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = capstan::cli::Cli::parse();
    match capstan::commands::run(cli) {
        Ok(status) => status.into(),
        Err(err) => {
            if err.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// mimalloc instead of the system allocator: rendering allocates many small strings and
/// maps on every core, and glibc's malloc cost ~30% of a 1,000-cluster render (bench/README).
/// Transparent huge pages are off (`no_thp`), which keeps peak memory where glibc's was.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
