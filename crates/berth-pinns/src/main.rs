//! The berth-pinns binary: see the library documentation.

use clap::Parser;

fn main() {
    let options = berth_pinns::Options::parse();
    match berth_pinns::run(&options) {
        Ok(infra_pid) => println!("{infra_pid}"),
        Err(err) => {
            eprintln!("berth-pinns: {err}");
            std::process::exit(err.exit_code());
        }
    }
}
