use clap::Parser;

fn main() {
    // berthd executes the shim through a read-only view's fd
    // (/proc/self/fd/N), which names the process "N": `ps`, `pgrep` and
    // operators look for berth-shim.
    let _ = nix::sys::prctl::set_name(c"berth-shim");
    let args = berth_shim::cli::Args::parse();
    std::process::exit(berth_shim::run(&args));
}
