//! `openshell gateway …`: saved gateways and the gateway's description.

use std::io::{self, IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use openshell_sdk::SdkError;
use serde::Serialize;

use crate::cli::GatewayCommand;
use crate::context::{Ctx, Target, read_ca_pem};
use crate::exit::{self, UsageError};
use crate::gateways::{self, GatewaysFile, SavedGateway, Store};
use crate::output::{Output, finish};
use crate::views;

/// Bound on checking a token at login: the token is saved anyway when the gateway is away.
const LOGIN_CHECK_TIMEOUT: Duration = Duration::from_secs(5);

pub async fn run(ctx: &Ctx, cmd: GatewayCommand) -> anyhow::Result<u8> {
    match cmd {
        GatewayCommand::Info { name, name_flag } => info(ctx, name.or(name_flag)).await,
        GatewayCommand::Add { first, url, name } => add(ctx, first, url, name),
        GatewayCommand::Login { name } => login(ctx, name).await,
        GatewayCommand::Logout { name } => logout(ctx, name),
        GatewayCommand::Select { name } => select(ctx, &name),
        GatewayCommand::List => list(ctx),
        GatewayCommand::Remove { name } => remove(ctx, &name),
    }
}

async fn info(ctx: &Ctx, name: Option<String>) -> anyhow::Result<u8> {
    let client = match name {
        Some(name) => {
            let store = Store::locate()?;
            let file = store.load()?;
            let saved = saved(&file, &name)?;
            saved_target(&store, &name, saved)?
                .connect(
                    crate::context::CONNECT_TIMEOUT,
                    crate::context::REQUEST_TIMEOUT,
                )
                .await?
        }
        None => ctx.client().await?,
    };
    let info = client.gateway_info().await?;
    ctx.out.print(&info, |o| views::gateway(o, &info))?;
    Ok(exit::SUCCESS)
}

/// A saved gateway with its own token and CA, whatever the flags say.
fn saved_target(store: &Store, name: &str, saved: &SavedGateway) -> anyhow::Result<Target> {
    let token = store.read_token(name)?;
    Ok(Target {
        url: saved.url.clone(),
        name: Some(name.to_owned()),
        url_source: "saved",
        token_source: token.as_ref().map(|_| "saved"),
        token,
        ca_source: saved.ca_cert.as_ref().map(|_| "saved"),
        ca_cert: saved.ca_cert.clone(),
    })
}

fn saved<'a>(file: &'a GatewaysFile, name: &str) -> Result<&'a SavedGateway, UsageError> {
    file.gateways.get(name).ok_or_else(|| {
        UsageError(format!(
            "no saved gateway is named {name:?}; see `openshell gateway list`, or save it with \
             `openshell gateway add {name} URL`"
        ))
    })
}

/// The gateway a command names, else the selected one.
fn name_or_selected(file: &GatewaysFile, name: Option<String>) -> Result<String, UsageError> {
    name.or_else(|| file.selected.clone()).ok_or_else(|| {
        UsageError(
            "no gateway is selected: name one, or select one with `openshell gateway select NAME`"
                .into(),
        )
    })
}

fn add(ctx: &Ctx, first: String, url: Option<String>, name: Option<String>) -> anyhow::Result<u8> {
    let (name, url) = match url {
        Some(url) => (first, url),
        None => {
            let name = match name {
                Some(name) => name,
                None => gateways::name_from_url(&first).ok_or_else(|| {
                    UsageError(format!(
                        "cannot make a gateway name from {first:?}: give one, \
                         `openshell gateway add NAME URL`"
                    ))
                })?,
            };
            (name, first)
        }
    };
    gateways::check_name(&name)?;
    gateways::check_url(&url)?;
    let ca_cert = own_ca_cert(ctx)
        .map(|path| -> anyhow::Result<PathBuf> {
            read_ca_pem(&path)?;
            // Saved absolute, so later commands find it from any directory.
            Ok(std::path::absolute(&path)?)
        })
        .transpose()?;
    let store = Store::locate()?;
    let mut file = store.load()?;
    let new = SavedGateway { url, ca_cert };
    let previous = file.gateways.insert(name.clone(), new.clone());
    if file.selected.is_none() {
        file.selected = Some(name.clone());
    }
    store.save(&file)?;
    if let Some(previous) = previous
        && previous.url != new.url
        && store.remove_token(&name)?
    {
        ctx.warn(format!(
            "gateway {name}'s address changed, so its saved token was removed; \
             run `openshell gateway login {name}` again"
        ));
    }
    let selected = file.selected.as_deref() == Some(name.as_str());
    let view = ListedGateway::new(&store, &name, &new, selected)?;
    ctx.out.print(&view, |o| finish(o.kv(view.rows())))?;
    if selected {
        ctx.note(format!("gateway {name} is selected"));
    } else {
        ctx.note(format!(
            "select it with `openshell gateway select {name}`, or pass --gateway {name}"
        ));
    }
    if view.token.is_none() {
        ctx.note(format!(
            "save its operator token with `openshell gateway login {name}`"
        ));
    }
    Ok(exit::SUCCESS)
}

/// `--ca-cert` given on the command line: OPENSHELL_CA_CERT is for reaching
/// a gateway, not something to save by accident.
fn own_ca_cert(ctx: &Ctx) -> Option<PathBuf> {
    let ca = ctx.global.ca_cert.clone()?;
    let from_env = std::env::var_os("OPENSHELL_CA_CERT").is_some_and(|v| Path::new(&v) == ca);
    (!from_env).then_some(ca)
}

async fn login(ctx: &Ctx, name: Option<String>) -> anyhow::Result<u8> {
    let store = Store::locate()?;
    let file = store.load()?;
    let name = name_or_selected(&file, name)?;
    let saved = saved(&file, &name)?;
    let token = read_token(&name)?;
    let mut target = saved_target(&store, &name, saved)?;
    target.token = Some(token.clone());
    match check_token(&target).await {
        Ok(()) => ctx.note(format!("gateway {name} accepted the token")),
        Err(SdkError::Unauthenticated(message)) => {
            return Err(anyhow::anyhow!(
                "gateway {name} refused the token ({message}); nothing was saved"
            ));
        }
        Err(err) => ctx.warn(format!(
            "could not check the token with gateway {name} ({err}); saving it anyway"
        )),
    }
    let path = store.write_token(&name, &token)?;
    ctx.note(format!(
        "token saved for gateway {name} in {} (mode 0600)",
        path.display()
    ));
    Ok(exit::SUCCESS)
}

async fn check_token(target: &Target) -> Result<(), SdkError> {
    let client = target
        .connect(LOGIN_CHECK_TIMEOUT, LOGIN_CHECK_TIMEOUT)
        .await
        .map_err(|err| match err.downcast::<SdkError>() {
            Ok(sdk) => sdk,
            Err(other) => SdkError::Transport(format!("{other:#}")),
        })?;
    client.gateway_info().await.map(|_| ())
}

/// The token from a hidden prompt on a terminal, else all of stdin. Never an argument.
fn read_token(name: &str) -> anyhow::Result<String> {
    let token = if io::stdin().is_terminal() && io::stderr().is_terminal() {
        let term = dialoguer::console::Term::stderr();
        term.write_str(&format!("Operator token for gateway {name}: "))?;
        term.read_secure_line()?
    } else {
        let mut text = String::new();
        io::stdin()
            .read_to_string(&mut text)
            .map_err(|err| anyhow::anyhow!("cannot read the token from stdin: {err}"))?;
        text
    };
    let token = token.trim();
    if token.is_empty() {
        return Err(UsageError(
            "no token was given: type it at the prompt, or pipe it in \
             (`openshell gateway login NAME < token-file`)"
                .into(),
        )
        .into());
    }
    // What is refused is not echoed: it is a secret.
    if token.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(UsageError(
            "the token holds whitespace or control characters (more than one line?); \
             give the token alone"
                .into(),
        )
        .into());
    }
    Ok(token.to_owned())
}

fn logout(ctx: &Ctx, name: Option<String>) -> anyhow::Result<u8> {
    let store = Store::locate()?;
    let file = store.load()?;
    let name = name_or_selected(&file, name)?;
    saved(&file, &name)?;
    if store.remove_token(&name)? {
        ctx.note(format!("removed the saved token of gateway {name}"));
    } else {
        ctx.note(format!("gateway {name} had no saved token"));
    }
    Ok(exit::SUCCESS)
}

fn select(ctx: &Ctx, name: &str) -> anyhow::Result<u8> {
    let store = Store::locate()?;
    let mut file = store.load()?;
    saved(&file, name)?;
    file.selected = Some(name.to_owned());
    store.save(&file)?;
    ctx.note(format!("gateway {name} is selected"));
    Ok(exit::SUCCESS)
}

fn remove(ctx: &Ctx, name: &str) -> anyhow::Result<u8> {
    let store = Store::locate()?;
    let mut file = store.load()?;
    saved(&file, name)?;
    file.gateways.remove(name);
    if file.selected.as_deref() == Some(name) {
        file.selected = None;
        ctx.note(format!(
            "gateway {name} was selected; none is now (`openshell gateway select NAME`)"
        ));
    }
    store.save(&file)?;
    store.remove_token(name)?;
    ctx.note(format!("removed gateway {name} and its saved token"));
    Ok(exit::SUCCESS)
}

/// A saved gateway as `gateway list` and `gateway add` print it; the token
/// only as where it is saved.
#[derive(Debug, Serialize)]
struct ListedGateway {
    name: String,
    url: String,
    ca_cert: Option<PathBuf>,
    /// The file the token is saved in, if one is.
    token: Option<PathBuf>,
    selected: bool,
}

impl ListedGateway {
    fn new(
        store: &Store,
        name: &str,
        saved: &SavedGateway,
        selected: bool,
    ) -> anyhow::Result<Self> {
        let token_path = store.token_path(name);
        Ok(Self {
            name: name.to_owned(),
            url: saved.url.clone(),
            ca_cert: saved.ca_cert.clone(),
            token: store.read_token(name)?.map(|_| token_path),
            selected,
        })
    }

    fn rows(&self) -> Vec<(&'static str, String)> {
        vec![
            ("name", self.name.clone()),
            ("url", self.url.clone()),
            ("ca cert", path_or_dash(self.ca_cert.as_deref())),
            ("token", token_cell(self.token.as_deref())),
            ("selected", crate::output::yes_no(self.selected)),
        ]
    }
}

fn path_or_dash(path: Option<&Path>) -> String {
    path.map_or_else(|| "-".to_owned(), |p| p.display().to_string())
}

fn token_cell(path: Option<&Path>) -> String {
    match path {
        Some(path) => format!("saved ({})", path.display()),
        None => "none".to_owned(),
    }
}

fn list(ctx: &Ctx) -> anyhow::Result<u8> {
    let store = Store::locate()?;
    let file = store.load()?;
    let listed = file
        .gateways
        .iter()
        .map(|(name, saved)| {
            ListedGateway::new(
                &store,
                name,
                saved,
                file.selected.as_deref() == Some(name.as_str()),
            )
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    ctx.out.print(&listed, |o| table(o, &listed))?;
    if listed.is_empty() {
        ctx.note("no saved gateways; add one with `openshell gateway add NAME URL`");
    }
    Ok(exit::SUCCESS)
}

fn table(out: &Output, listed: &[ListedGateway]) -> String {
    let mut table = out.list(&["", "NAME", "URL", "CA CERT", "TOKEN"]);
    for g in listed {
        table.add_row([
            if g.selected { "*" } else { "" }.to_owned(),
            g.name.clone(),
            g.url.clone(),
            path_or_dash(g.ca_cert.as_deref()),
            if g.token.is_some() { "saved" } else { "none" }.to_owned(),
        ]);
    }
    finish(table)
}
