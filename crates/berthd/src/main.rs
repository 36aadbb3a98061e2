//! The berthd binary: parses flags and hands over to the library.

use std::process::ExitCode;

use clap::Parser;

use berthd::cli::{Cli, Command, ConfigCommand, ImagesCommand};
use berthd::config::Config;
use berthd::{daemon, logging};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The defaults print whatever the installed config holds.
    if let Some(Command::Config {
        what: Some(ConfigCommand::Default),
    }) = cli.command
    {
        print!("{}", berthd::config::DEFAULT_CONFIG_TEXT);
        return ExitCode::SUCCESS;
    }
    let loaded = Config::load(cli.config.as_deref())
        .and_then(|(config, source)| Ok((config.with_overrides(&cli.overrides())?, source)));
    let (config, source) = match loaded {
        Ok(loaded) => loaded,
        Err(err) => return fail(&err),
    };

    if let Some(Command::Config { what: None }) = cli.command {
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
    let log = logging::init(filter);
    daemon::raise_nofile_limit();

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
    let reload = berthd::reload::ReloadInputs {
        path: cli.config.clone(),
        overrides: cli.overrides(),
        log_flag: cli.log_level.clone(),
        log: Some(log),
    };
    match runtime.block_on(daemon::run(config, cgroup_driver, &source, reload)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => fail(&err),
    }
}

fn fail(err: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("berthd: {err}");
    ExitCode::FAILURE
}
