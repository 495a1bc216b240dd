//! Reading a provider's answer under a bound. A provider (or whatever answers at its address)
//! may send a body of any size; Steward keeps what it needs to grade the answer and to show it,
//! and stops reading past [`PROVIDER_ANSWER_BYTES_MAX`] instead of holding it all in memory.

/// The most of a provider's answer read, in bytes. A refund, a lookup or a read-back answers in
/// a few KiB; stored text answers are cut to 256 KiB after redaction, and a JSON answer cut here
/// no longer parses and is stored as that cut text. 1 MiB leaves a secret that starts inside the
/// stored part whole for redaction.
pub const PROVIDER_ANSWER_BYTES_MAX: usize = 1024 * 1024;

/// What was read of an answer's body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AnswerBody {
    pub bytes: Vec<u8>,
    /// More followed that was not read.
    pub truncated: bool,
}

/// Reads `response`'s body up to `max` bytes; the rest is left unread (the connection is
/// dropped with the response). A transport error while reading is returned as it is.
pub(crate) async fn read_capped(
    mut response: reqwest::Response,
    max: usize,
) -> reqwest::Result<AnswerBody> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = max - bytes.len();
        if chunk.len() > room {
            bytes.extend_from_slice(&chunk[..room]);
            return Ok(AnswerBody {
                bytes,
                truncated: true,
            });
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(AnswerBody {
        bytes,
        truncated: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A one-shot HTTP server on loopback answering with a body of `len` bytes.
    async fn answering(len: usize) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut head = [0u8; 1024];
            let _ = socket.read(&mut head).await;
            let header = format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n");
            let _ = socket.write_all(header.as_bytes()).await;
            let block = vec![b'x'; 64 * 1024];
            let mut sent = 0;
            while sent < len {
                let n = block.len().min(len - sent);
                if socket.write_all(&block[..n]).await.is_err() {
                    return; // The reader stopped: what this test wants.
                }
                sent += n;
            }
        });
        format!("http://{addr}/")
    }

    /// A provider answering 64 MiB is read up to the bound, not held whole.
    #[tokio::test]
    async fn a_huge_answer_is_read_only_up_to_the_bound() {
        let url = answering(64 * 1024 * 1024).await;
        let response = reqwest::get(&url).await.unwrap();
        let body = read_capped(response, PROVIDER_ANSWER_BYTES_MAX)
            .await
            .unwrap();
        assert_eq!(body.bytes.len(), PROVIDER_ANSWER_BYTES_MAX);
        assert!(body.truncated);
    }

    #[tokio::test]
    async fn a_small_answer_is_read_whole() {
        let url = answering(300).await;
        let response = reqwest::get(&url).await.unwrap();
        let body = read_capped(response, PROVIDER_ANSWER_BYTES_MAX)
            .await
            .unwrap();
        assert_eq!(body.bytes, vec![b'x'; 300]);
        assert!(!body.truncated);
    }
}
