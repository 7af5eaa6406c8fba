/// The version of the package. Every executable prints it with `--version`, the daemon reports it in
/// `sleepproxyctl status`, and deploy/build-deb.sh reads the .deb's version from this line.
public enum SleepProxyVersion {
    public static let current = "0.8.0"
}
