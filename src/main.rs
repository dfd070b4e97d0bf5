//! The votegraph server binary.

use clap::Parser;

/// The default allocator spent about a quarter of the request path in
/// malloc/free under load (see the README's Performance section).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use votegraph::config::Settings;
use votegraph::startup::Application;
use votegraph::telemetry;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let settings = Settings::parse();
    telemetry::init_logging(settings.log_format);
    let app = Application::build(settings).await?;
    app.run_until_stopped().await
}
