# The market's parameters are declared with the cluster (the cluster file's [market] table):
# the model moves from the market app to this one; its table stays where it is.

from decimal import Decimal

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("cluster", "0001_initial"),
        ("market", "0002_market_state_quote"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="MarketParameters",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "floor_ratio",
                            models.DecimalField(
                                decimal_places=3,
                                default=Decimal("0.1"),
                                help_text="floor = this share of the original price (0.1: up to 90% saving)",
                                max_digits=4,
                                validators=[
                                    django.core.validators.MinValueValidator(Decimal("0.001")),
                                    django.core.validators.MaxValueValidator(Decimal("1")),
                                ],
                            ),
                        ),
                        (
                            "smoothing",
                            models.FloatField(
                                default=0.2,
                                help_text="share of the gap to the demand target closed per tick",
                                validators=[
                                    django.core.validators.MinValueValidator(0),
                                    django.core.validators.MaxValueValidator(1),
                                ],
                            ),
                        ),
                        (
                            "volatility",
                            models.FloatField(
                                default=0.02,
                                help_text="seeded random part of each move, relative to the price",
                                validators=[
                                    django.core.validators.MinValueValidator(0),
                                    django.core.validators.MaxValueValidator(1),
                                ],
                            ),
                        ),
                        (
                            "sensitivity",
                            models.FloatField(
                                default=1.0,
                                help_text="how strongly demand against supply moves the target",
                                validators=[django.core.validators.MinValueValidator(0)],
                            ),
                        ),
                        (
                            "average_window_seconds",
                            models.FloatField(
                                default=3600.0,
                                help_text="window of Lingjun's system average price",
                                validators=[django.core.validators.MinValueValidator(1)],
                            ),
                        ),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                    ],
                    options={
                        "verbose_name": "market parameters",
                        "verbose_name_plural": "market parameters",
                        "db_table": "market_marketparameters",
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
