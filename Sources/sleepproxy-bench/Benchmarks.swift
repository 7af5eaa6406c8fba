@main
enum Benchmarks {
    static func main() {}
}
