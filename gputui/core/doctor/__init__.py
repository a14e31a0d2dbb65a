"""``gputui doctor`` as one package: :mod:`.facts` (what is known, frozen), :mod:`.probes` (reading
the outside world: /dev, /proc, the Docker API), :mod:`.gather` (one poll plus the probes → facts)
and :mod:`.checks` (pure judgements: pass, warn, fail or skip, one sentence and the fix), with
:mod:`.mig` for the MIG checks.
``gputui.commands.doctor`` only parses the arguments and prints.
"""
