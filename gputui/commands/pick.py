"""gputui pick (interim: being built)."""
def add_parser(sub, common):
    p = sub.add_parser("pick", help="pick")
    common(p)
    return p

def run(ctx):
    print("gputui: 'pick' is not built yet.", file=ctx.stderr)
    return 2
