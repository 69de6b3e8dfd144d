from static_runtime.cli import main

main(prog_name="static-runtime")
