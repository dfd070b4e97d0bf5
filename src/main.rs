//! The votegraph server binary.

use clap::Parser;

/// The default allocator spent about a quarter of the request path in
/// malloc/free under load.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use votegraph::config::Settings;
use votegraph::startup::Application;
use votegraph::telemetry;

/// mimalloc gives freed memory back to the OS a while after it is freed,
/// but only when the process allocates again: after a burst of large
/// responses, an idle server would keep its peak. Asking it to collect
/// every second hands that memory back within a second or two.
async fn return_freed_memory() {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        tick.tick().await;
        // SAFETY: mi_collect only walks mimalloc's own structures, which
        // it locks itself; it takes no pointer from us.
        unsafe { libmimalloc_sys::mi_collect(false) };
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut settings = Settings::parse();
    if let Some(command) = settings.command.take() {
        return votegraph::admin::run(command, &settings).await;
    }
    telemetry::init_logging(settings.log_format);
    tokio::spawn(return_freed_memory());
    let app = Application::build(settings).await?;
    app.run_until_stopped().await
}
