"""gputui kill (interim: being built)."""
def add_parser(sub, common):
    p = sub.add_parser("kill", help="kill")
    common(p)
    return p

def run(ctx):
    print("gputui: 'kill' is not built yet.", file=ctx.stderr)
    return 2
