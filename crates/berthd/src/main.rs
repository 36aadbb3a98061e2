//! The berthd binary: parses flags and hands over to the library.

use std::process::ExitCode;

use clap::Parser;

use berthd::cli::{Cli, Command, ImagesCommand};
use berthd::config::Config;
use berthd::{daemon, logging};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let loaded = Config::load(cli.config.as_deref())
        .and_then(|(config, source)| Ok((config.with_overrides(&cli.overrides())?, source)));
    let (config, source) = match loaded {
        Ok(loaded) => loaded,
        Err(err) => return fail(&err),
    };

    if let Some(Command::Config) = cli.command {
        print!("{}", config.to_toml());
        return ExitCode::SUCCESS;
    }
    if let Some(Command::Images {
        command: ImagesCommand::Import { file, name },
    }) = &cli.command
    {
        return match berthd::image_import::import(&config, file, name.as_deref()) {
            Ok(records) => {
                for record in records {
                    println!("{} {}", record.id, record.repo_tags.join(" "));
                }
                ExitCode::SUCCESS
            }
            Err(err) => fail(&err),
        };
    }

    let filter = match logging::filter(cli.log_level.as_deref(), config.log_level) {
        Ok(filter) => filter,
        Err(err) => return fail(&err),
    };
    logging::init(filter);

    let cgroup_driver = match daemon::preflight(&config) {
        Ok(driver) => driver,
        Err(err) => return fail(&err),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return fail(&err),
    };
    match runtime.block_on(daemon::run(config, cgroup_driver, &source)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => fail(&err),
    }
}

fn fail(err: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("berthd: {err}");
    ExitCode::FAILURE
}
