"""gputui migrate (interim: being built)."""
def add_parser(sub, common):
    p = sub.add_parser("migrate", help="migrate")
    common(p)
    return p

def run(ctx):
    print("gputui: 'migrate' is not built yet.", file=ctx.stderr)
    return 2
