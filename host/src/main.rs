fn main() -> std::process::ExitCode {
    jobhost::cli::main()
}
