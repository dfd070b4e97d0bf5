//! The votegraph server binary.

use clap::Parser;

/// The default allocator spent about a quarter of the request path in
/// malloc/free under load (see the README's Performance section).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use tracing_subscriber::EnvFilter;
use votegraph::config::Settings;
use votegraph::startup::Application;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,poem=info")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let settings = Settings::parse();
    let app = Application::build(settings).await?;
    app.run_until_stopped().await
}
