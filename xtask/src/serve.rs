//! A small static file server for the demo and the tests: `/pkg/...` from `pkg/`, `/models/...` from the data
//! cache (the default model, see [`crate::data`]), `/fixtures/...` from `tests/fixtures/` (the tiny models
//! the package's e2e test loads), `/vendor/...` from `target/vendor/` (openai-node bundled for the demo,
//! `xtask/vendor.mjs`), everything else from `www/`, with the right MIME types
//! (`application/wasm` is needed for streaming compilation), the cross-origin isolation headers
//! (`Cross-Origin-Opener-Policy: same-origin`, `Cross-Origin-Embedder-Policy: require-corp`: kiln's threaded
//! build needs `SharedArrayBuffer`; `?isolation=off` leaves them out of one response), `Service-Worker-Allowed: /` (so kiln's Service Worker, served from `/pkg/`, may
//! take the whole origin as its scope), and CORS headers so the wasm tests (served by wasm-bindgen's runner on another
//! port) can fetch the model. GET and HEAD only; loopback only.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::thread::JoinHandle;

pub struct Server {
    pub addr: SocketAddr,
    thread: JoinHandle<()>,
}

impl Server {
    /// Blocks for as long as the server runs (until the process is interrupted).
    pub fn wait(self) {
        let _ = self.thread.join();
    }
}

/// The directories served.
#[derive(Clone)]
struct Mounts {
    www: PathBuf,
    pkg: PathBuf,
    models: PathBuf,
    fixtures: PathBuf,
    vendor: PathBuf,
}

/// Starts serving on 127.0.0.1:`port` (0: any free port) in a background thread; `/models/` serves `cache`.
pub fn start(root: &Path, cache: &Path, port: u16) -> Result<Server, String> {
    let listener = TcpListener::bind(("127.0.0.1", port))
        .map_err(|e| format!("cannot listen on 127.0.0.1:{port}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let mounts = Mounts {
        www: root.join("www"),
        pkg: root.join("pkg"),
        models: cache.to_path_buf(),
        fixtures: root.join("tests").join("fixtures"),
        vendor: root.join("target").join("vendor"),
    };
    let thread = std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mounts = mounts.clone();
            std::thread::spawn(move || {
                if let Err(e) = handle(stream, &mounts) {
                    eprintln!("serve: {e}");
                }
            });
        }
    });
    Ok(Server { addr, thread })
}

fn handle(stream: TcpStream, mounts: &Mounts) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    // Drain the headers; nothing in them changes the answer.
    let mut line = String::new();
    while reader.read_line(&mut line)? > 2 {
        line.clear();
    }
    let mut parts = request.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or("/"));
    let path = target.split(['?', '#']).next().unwrap_or("/");
    // `?isolation=off` serves a page without the isolation headers: the tests' page that is not
    // cross-origin isolated (kiln then runs its single-threaded build).
    let isolation = match target
        .split_once('?')
        .map(|(_, q)| q.split('&').any(|p| p == "isolation=off"))
    {
        Some(true) => "",
        _ => "Cross-Origin-Opener-Policy: same-origin\r\nCross-Origin-Embedder-Policy: require-corp\r\n",
    };
    let file = resolve(path, mounts);
    let mut out = stream;
    match (method, file.and_then(|f| std::fs::read(&f).ok().map(|b| (f, b)))) {
        ("GET" | "HEAD", Some((file, body))) => {
            write!(
                out,
                "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-cache\r\n\
                 {isolation}Access-Control-Allow-Origin: *\r\nCross-Origin-Resource-Policy: cross-origin\r\n\
                 Service-Worker-Allowed: /\r\nConnection: close\r\n\r\n",
                mime(&file),
                body.len()
            )?;
            if method == "GET" {
                out.write_all(&body)?;
            }
        }
        ("GET" | "HEAD", None) => {
            out.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 10\r\nConnection: close\r\n\r\nnot found\n")?
        }
        _ => out.write_all(
            b"HTTP/1.1 405 Method Not Allowed\r\nAllow: GET, HEAD\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )?,
    }
    out.flush()
}

/// Maps a URL path to a file under a mount; `None` for anything that would leave them.
fn resolve(path: &str, m: &Mounts) -> Option<PathBuf> {
    let path = percent_decode(path)?;
    let mounts = [
        ("/pkg/", &m.pkg),
        ("/models/", &m.models),
        ("/fixtures/", &m.fixtures),
        ("/vendor/", &m.vendor),
    ];
    let (base, rest) = mounts
        .iter()
        .find_map(|(prefix, dir)| path.strip_prefix(prefix).map(|rest| (*dir, rest)))
        .unwrap_or((&m.www, path.trim_start_matches('/')));
    let rel = Path::new(rest);
    if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return None;
    }
    let file = base.join(rel);
    let file = if file.is_dir() {
        file.join("index.html")
    } else {
        file
    };
    file.is_file().then_some(file)
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn mime(file: &Path) -> &'static str {
    match file.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" => "application/json",
        "wasm" => "application/wasm",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "txt" | "md" | "ts" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_mounts() {
        let root = crate::root();
        let m = Mounts {
            www: root.join("www"),
            pkg: root.join("pkg"),
            models: root.join("xtask"),
            fixtures: root.join("tests").join("fixtures"),
            vendor: root.join("target").join("vendor"),
        };
        let www = &m.www;
        assert_eq!(resolve("/", &m), Some(www.join("index.html")));
        assert_eq!(resolve("/index.html", &m), Some(www.join("index.html")));
        assert_eq!(
            resolve("/models/fetch.py", &m),
            Some(root.join("xtask").join("fetch.py"))
        );
        assert_eq!(resolve("/../Cargo.toml", &m), None);
        assert_eq!(resolve("/%2e%2e/Cargo.toml", &m), None);
        assert_eq!(resolve("/pkg/../../Cargo.toml", &m), None);
        assert_eq!(resolve("/models/../Cargo.toml", &m), None);
        assert_eq!(resolve("/missing.js", &m), None);
        assert_eq!(resolve("/%zz", &m), None);
    }

    #[test]
    fn serves_files_over_http() {
        let root = crate::root();
        let server = start(&root, &root.join("xtask"), 0).expect("listen");
        let mut stream = TcpStream::connect(server.addr).expect("connect");
        stream
            .write_all(b"GET /index.html?x=1 HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut response = String::new();
        std::io::Read::read_to_string(&mut stream, &mut response).unwrap();
        assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
        assert!(response.contains("Content-Type: text/html"));
        assert!(response.contains("<title>kiln"));
        assert!(response.contains("Access-Control-Allow-Origin: *"));
    }
}
