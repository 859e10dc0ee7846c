from liftgate.cli.main import main

raise SystemExit(main())
