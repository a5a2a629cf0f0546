# MarketParameters now belongs to the cluster app (cluster 0002), on the same table.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("market", "0002_market_state_quote"),
        ("cluster", "0002_marketparameters"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="MarketParameters")],
            database_operations=[],
        ),
    ]
