import NIOSSL

extension HomeAssistantLink {
    /// TLS failures in words a user can act on; BoringSSL's own are for a bug report.
    static func describe(_ error: any Error) -> String {
        if let error = error as? NIOSSLExtraError, error == .failedToValidateHostname {
            return "its certificate is not for the host or address in the mqtt URL"
        }
        if case .handshakeFailed(let reason) = error as? NIOSSLError {
            let text = "\(reason)"
            if text.contains("CERTIFICATE_VERIFY_FAILED") {
                return
                    "its certificate is not signed by an authority this machine trusts: name the one that signed it with mqtt-ca-file"
            }
            if text.contains("WRONG_VERSION_NUMBER") || text.contains("PACKET_LENGTH") {
                return "it does not speak TLS on this port: mqtts:// is for a TLS listener (usually 8883)"
            }
            return "the TLS handshake failed (\(text))"
        }
        return "\(error)"
    }
}
