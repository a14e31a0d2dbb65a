"""gputui doctor (interim: being built)."""
def add_parser(sub, common):
    p = sub.add_parser("doctor", help="doctor")
    common(p)
    return p

def run(ctx):
    print("gputui: 'doctor' is not built yet.", file=ctx.stderr)
    return 2
