//! The `capstan` binary: parse arguments, run the command, map the result to an exit code.

use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = capstan::cli::parse();
    match capstan::cli::commands::run(cli) {
        Ok(status) => status.into(),
        Err(err) => {
            if err.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            eprintln!(
                "error: {}",
                capstan::review::report::error_message(&format!("{err:#}"))
            );
            ExitCode::from(2)
        }
    }
}

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
