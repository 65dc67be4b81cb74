from synth_ai.cli.main import main

raise SystemExit(main())
