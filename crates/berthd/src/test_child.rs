//! A process a test starts, killed and reaped when dropped, so a failing
//! assertion leaves no process behind.

use std::process::{Child, Command, ExitStatus};

pub(crate) struct TestChild(Child);

impl TestChild {
    pub(crate) fn spawn(command: &mut Command) -> Self {
        Self(command.spawn().expect("spawn a test process"))
    }

    pub(crate) fn id(&self) -> u32 {
        self.0.id()
    }

    /// Sends SIGKILL without reaping: the caller decides when it is gone.
    pub(crate) fn kill(&mut self) -> std::io::Result<()> {
        self.0.kill()
    }

    /// Waits for it to exit, and reaps it.
    pub(crate) fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.0.wait()
    }

    /// Ends and reaps it.
    pub(crate) fn end(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for TestChild {
    fn drop(&mut self) {
        self.end();
    }
}
