//! The `capstan` binary: everything is the library's (`capstan::run_command_line`); this
//! file only chooses the allocator.

fn main() -> std::process::ExitCode {
    capstan::run_command_line()
}

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
