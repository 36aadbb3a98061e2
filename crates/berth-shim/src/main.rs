use clap::Parser;

fn main() {
    let args = berth_shim::cli::Args::parse();
    std::process::exit(berth_shim::run(&args));
}
